/**
 * QuantLinear on CUDA against the same graph on the CPU (the addon's host path, which the CPU tests
 * check against ONNX Runtime's MatMulNBits): every CUDA path (at 1..8 rows the wide kernel of 16-bit
 * types up to 4 rows, the tensor-core GEMV of float16 and 4-bit bfloat16 and the plain one, up to 128
 * rows the tiles of weights dequantized in registers (those in shared memory where K is not a multiple
 * of 16), the
 * dequantize-and-GEMM beyond), 4 and 8 bits, with and without zero points, blocks of 32 and 128, K
 * with a partial last block, bias and SiLU, float16, bfloat16 and float32, the CUDA outputs those of
 * a replayed CUDA graph. Returns one line per case with its largest relative error.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeRaw, encodeFloats, type FloatType } from '../../../src/modelbuild/float-bits.ts';
import { GraphBuilder } from '../../../src/modelbuild/graph.ts';
import { quantLinear } from '../../../src/modelbuild/quant-linear-addon.ts';
import type { NativeAddon } from '../../../src/native/index.ts';
import { quantize, roundTo, seeded } from '../../../test/helpers/quant.ts';

export interface ParityCase {
  name: string;
  worst: number;
  tolerance: number;
  ok: boolean;
  error?: string;
}

const DTYPE = { float32: 'fp32', float16: 'fp16', bfloat16: 'bf16' } as const;
const RAW = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' } as const;
const TOLERANCE: Record<FloatType, number> = { float32: 1e-4, float16: 4e-3, bfloat16: 3e-2 };

export function parity(addon: NativeAddon, dir: string, deadline: number): ParityCase[] {
  const results: ParityCase[] = [];
  // The wide kernel's (8 bits, K of 4096 or more), the tensor-core GEMV's (K and the block multiples of
  // 32), then a partial last block.
  const shapes = [
    { K: 4096, N: 24, block: 128 },
    { K: 2048, N: 72, block: 128 },
    { K: 256, N: 40, block: 32 },
    { K: 512, N: 136, block: 128 },
    { K: 200, N: 72, block: 32 },
    // Blocks of 16 at 4 bits: rows of 104 bytes, off the 16-byte boundaries the tiles' stages copy from.
    { K: 208, N: 40, block: 16 },
  ];
  for (const type of ['float16', 'bfloat16', 'float32'] as const) {
    for (const bits of [4, 8] as const) {
      for (const zeroPoints of [false, true]) {
        for (const { K, N, block } of type === 'float16' ? shapes : shapes.slice(0, 2)) {
          const q = quantize(seeded(N * K, 3 + K, 0.2), N, K, bits, block, zeroPoints, type);
          const g = new GraphBuilder(type);
          const x = g.input('x', type, ['rows', K]);
          const w = {
            weight: g.constantOf('uint8', [...q.weight], [N, q.blocks, (block * bits) / 8]),
            scales: g.floatConstant([...q.scales], [N, q.blocks]),
            ...(q.zeroPoints === undefined ? {} : { zeroPoints: g.constantOf('uint8', [...q.zeroPoints], [q.zeroPoints.length]) }),
          };
          const bias = g.floatConstant([...roundTo(seeded(N, 9, 0.5), type)], [N]);
          g.output('y', quantLinear(g, x, w, { K, N, bits, blockSize: block }, { bias, activation: 'silu' }), type, ['rows', N]);
          const path = join(dir, `parity-${type}-${bits}-${zeroPoints}-${K}.onnx`);
          writeFileSync(path, g.serialize().model);
          // 16-bit steps of up to 8 rows run in the wide kernel (up to 4; CHORUS_QUANT_GEMV=wide: whatever K,
          // in groups of rows where K is short), on tensor cores (mma) or as float32's do (plain); float16's
          // 8-bit steps also in the wide kernel's float32 arithmetic rather than float16 pairs (floats:
          // CHORUS_QUANT_GEMV=wide, CHORUS_QUANT_BYTE_PAIRS=0).
          const floats = type === 'float16' && bits === 8 ? ['floats'] : [];
          const gemvs = (M: number): string[] => (M <= 4 ? ['', 'wide', ...floats, 'mma', 'plain'] : ['', 'mma', 'plain']);
          const cases = [1, 3, 4, 8, 9, 32, 33, 64, 100, 130].flatMap((M) => (type !== 'float32' && M <= 8 ? gemvs(M).map((gemv) => [M, gemv]) : [[M, '']]) as Array<[number, string]>);
          for (const [M, gemv] of cases) {
            if (Date.now() > deadline) return results;
            const name = `${type} int${bits} ${zeroPoints ? 'zero points' : 'symmetric'} K ${K} block ${block} rows ${M}${gemv === '' ? '' : ` (${gemv} GEMV)`}`;
            const data = encodeFloats(roundTo(seeded(M * K, 17 + M), type), type);
            const inputs = [{ name: 'x', type, dims: [M, K], data }];
            try {
              // On CUDA: a plain run, then the outputs of a replay of its captured graph.
              const run = (provider: 'cpu' | 'cuda'): Float32Array =>
                decodeRaw(addon.runGraph({ model: path, provider, dtype: DTYPE[type], cudaGraph: provider === 'cuda', iterations: provider === 'cuda' ? 1 : 0 }, inputs).outputs[0]!.data, RAW[type]);
              const want = run('cpu');
              process.env.CHORUS_QUANT_GEMV = gemv === 'floats' ? 'wide' : gemv;
              if (gemv === 'floats') process.env.CHORUS_QUANT_BYTE_PAIRS = '0';
              let got: Float32Array;
              try {
                got = run('cuda');
              } finally {
                delete process.env.CHORUS_QUANT_GEMV;
                delete process.env.CHORUS_QUANT_BYTE_PAIRS;
              }
              let worst = 0;
              for (let i = 0; i < want.length; i++) {
                const e = Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!));
                if (Number.isNaN(e) || e > worst) worst = e;
              }
              results.push({ name, worst, tolerance: TOLERANCE[type], ok: worst <= TOLERANCE[type] });
            } catch (error) {
              results.push({ name, worst: Number.NaN, tolerance: TOLERANCE[type], ok: false, error: String(error).slice(0, 300) });
            }
          }
        }
      }
    }
  }
  return results;
}
