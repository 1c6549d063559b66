import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { decodeRaw, encodeFloats, type FloatType } from '../../src/modelbuild/float-bits.ts';
import { float, GraphBuilder } from '../../src/modelbuild/graph.ts';
import type { LinearActivation } from '../../src/modelbuild/layers.ts';
import { quantLinear } from '../../src/modelbuild/quant-linear-addon.ts';
import { loadNative, type GraphTensor } from '../../src/native/index.ts';
import { ACTIVATIONS, dequantize, matmulReference, quantize, roundTo, seeded, type Quantized } from '../helpers/quant.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-quant-linear-');
const DTYPES: Record<FloatType, 'fp32' | 'fp16' | 'bf16'> = { float32: 'fp32', float16: 'fp16', bfloat16: 'bf16' };
const RAW: Record<FloatType, 'F32' | 'F16' | 'BF16'> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };

interface Case {
  M: number;
  K: number;
  N: number;
  bits: 4 | 8;
  blockSize: number;
  zeroPoints: boolean;
  bias?: boolean;
  activation?: LinearActivation;
  type?: FloatType;
}

/** `q`'s weight, scales and zero points as constants of `g`. */
function quantizedConstants(g: GraphBuilder, c: Case, q: Quantized): { weight: string; scales: string; zeroPoints?: string } {
  return {
    weight: g.constantOf('uint8', [...q.weight], [c.N, q.blocks, (c.blockSize * c.bits) / 8]),
    scales: g.floatConstant([...q.scales], [c.N, q.blocks]),
    ...(q.zeroPoints === undefined ? {} : { zeroPoints: g.constantOf('uint8', [...q.zeroPoints], [q.zeroPoints.length]) }),
  };
}

/** A graph of one quantized projection: QuantLinear, or ONNX Runtime's MatMulNBits (without the activation). */
function model(c: Case, q: Quantized, bias: Float32Array | undefined, op: 'QuantLinear' | 'MatMulNBits'): string {
  const type = c.type ?? 'float32';
  const g = new GraphBuilder(type);
  const x = g.input('x', type, ['rows', c.K]);
  const w = quantizedConstants(g, c, q);
  const b = bias === undefined ? undefined : g.floatConstant([...bias], [c.N]);
  const shape = { K: c.K, N: c.N, bits: c.bits, blockSize: c.blockSize };
  const y =
    op === 'QuantLinear'
      ? quantLinear(g, x, w, shape, { ...(b === undefined ? {} : { bias: b }), ...(c.activation === undefined ? {} : { activation: c.activation }) })
      : g.op('MatMulNBits', [x, w.weight, w.scales, w.zeroPoints ?? '', '', b ?? ''].filter((v, i, all) => v !== '' || all.slice(i).some((u) => u !== '')), { K: c.K, N: c.N, bits: c.bits, block_size: c.blockSize }, { domain: 'com.microsoft' });
  g.output('y', y, type, ['rows', c.N]);
  const path = join(root, `${op}-${JSON.stringify(c).replace(/[^a-z0-9]+/gi, '_')}.onnx`);
  writeFileSync(path, g.serialize().model);
  return path;
}

function runAddon(path: string, x: Float32Array, c: Case, extra: Partial<Parameters<NonNullable<typeof addon>['runGraph']>[0]> = {}): Float32Array {
  const type = c.type ?? 'float32';
  const input: GraphTensor = { name: 'x', type, dims: [c.M, c.K], data: encodeFloats(Float32Array.from(x), type) };
  const { outputs } = addon!.runGraph({ model: path, provider: 'cpu', dtype: DTYPES[type], ...extra }, [input]);
  assert.deepEqual(outputs[0]!.dims, [c.M, c.N]);
  return decodeRaw(outputs[0]!.data, RAW[type]);
}

async function runOrt(path: string, x: Float32Array, c: Case): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(path, { executionProviders: ['cpu'] });
  const type = c.type ?? 'float32';
  const feed = type === 'float32' ? new ort.Tensor('float32', x, [c.M, c.K]) : new ort.Tensor('float16', new Uint16Array(encodeFloats(x, type).buffer), [c.M, c.K]);
  const { y } = await session.run({ x: feed });
  await session.release();
  const data = y!.data;
  return data instanceof Float32Array ? data : decodeRaw(new Uint8Array((data as Uint16Array).buffer), 'F16');
}

function assertClose(got: Float32Array, want: Float32Array, tolerance: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0;
  let at = 0;
  for (let i = 0; i < got.length; i++) {
    const error = Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!));
    if (Number.isNaN(error) || error > worst) {
      worst = error;
      at = i;
    }
  }
  assert.ok(worst <= tolerance, `${what}: element ${at} is ${got[at]}, expected ${want[at]} (relative error ${worst} > ${tolerance})`);
}

/** The case's inputs: x, weights quantized by the test's quantizer, the bias. */
function inputs(c: Case): { x: Float32Array; q: Quantized; bias: Float32Array | undefined } {
  const type = c.type ?? 'float32';
  const x = roundTo(seeded(c.M * c.K, 11 + c.K), type);
  const q = quantize(seeded(c.N * c.K, 7 + c.N, 0.2), c.N, c.K, c.bits, c.blockSize, c.zeroPoints, type);
  const bias = c.bias === true ? roundTo(seeded(c.N, 5, 0.5), type) : undefined;
  return { x, q, bias };
}

const cuda = addon !== undefined && addon.cuda && addon.cudaDevices() > 0;

/** The gate of ungated products [M, N] (the gate's N / 2, then the up projection's): SiLU rounded, times up, rounded. */
function gateOf(products: Float32Array, M: number, N: number, type: FloatType): Float32Array {
  const half = N / 2;
  const want = new Float32Array(M * half);
  for (let r = 0; r < M; r++) {
    for (let o = 0; o < half; o++) {
      const gate = roundTo(Float32Array.of(ACTIVATIONS.silu!(products[r * N + o]!)), type)[0]!;
      want[r * half + o] = roundTo(Float32Array.of(gate * products[r * N + half + o]!), type)[0]!;
    }
  }
  return want;
}

/** A gated QuantLinear of `q` (its N rows the gate's, then the up projection's) and the same ungated, without the activation. */
function gatedModels(c: Case, q: Quantized, bias: Float32Array): { gated: string; ungated: string } {
  const type = c.type ?? 'float32';
  const path = (gated: boolean): string => {
    const g = new GraphBuilder(type);
    const x = g.input('x', type, ['rows', c.K]);
    const w = quantizedConstants(g, c, q);
    const options = { bias: g.floatConstant([...bias], [c.N]), ...(gated ? { activation: 'silu' as const, gated: true } : {}) };
    g.output('y', quantLinear(g, x, w, { K: c.K, N: c.N, bits: c.bits, blockSize: c.blockSize }, options), type, ['rows', gated ? c.N / 2 : c.N]);
    const file = join(root, `${gated ? 'gated' : 'ungated'}-${JSON.stringify(c).replace(/[^a-z0-9]+/gi, '_')}.onnx`);
    writeFileSync(file, g.serialize().model);
    return file;
  };
  return { gated: path(true), ungated: path(false) };
}

function runGated(path: string, x: Float32Array, c: Case, outputs: number, provider: 'cpu' | 'cuda'): Float32Array {
  const type = c.type ?? 'float32';
  const input: GraphTensor = { name: 'x', type, dims: [c.M, c.K], data: encodeFloats(Float32Array.from(x), type) };
  const { outputs: out } = addon!.runGraph({ model: path, provider, dtype: DTYPES[type], ...(provider === 'cuda' ? { cudaGraph: true, iterations: 1 } : {}) }, [input]);
  assert.deepEqual(out[0]!.dims, [c.M, outputs]);
  return decodeRaw(out[0]!.data, RAW[type]);
}

describe('a gated QuantLinear (a gated MLP\'s gate and up projections in one)', { skip }, () => {
  const cases: Case[] = [];
  for (const type of ['float32', 'float16'] as const) {
    for (const bits of [4, 8] as const) cases.push({ M: 3, K: 256, N: 48, bits, blockSize: 32, zeroPoints: true, type });
  }
  for (const c of cases) {
    test(`${c.type} int${c.bits}: activation(gate) * up, each rounded as the two projections and a Mul round them, on the CPU`, () => {
      const { x, q } = inputs(c);
      const bias = roundTo(seeded(c.N, 5, 0.5), c.type!);
      const { gated, ungated } = gatedModels(c, q, bias);
      const products = runGated(ungated, x, c, c.N, 'cpu');
      const half = c.N / 2;
      const want = gateOf(products, c.M, c.N, c.type!);
      // float32's SiLU here takes exp in double precision: a last-bit difference at most.
      assertClose(runGated(gated, x, c, half, 'cpu'), want, 1e-6, 'gated against its products');
    });
  }

  // Up to 4 rows the wide kernels take the gate in their epilogue (float16, 4 and 8 bits), and from 9 to
  // 128 rows the register tiles (K a multiple of 16); other rows run both products into scratch rows,
  // then Linear's gated pass. Either way the
  // gated output is what the ungated products on the device give through the gate (each product is
  // within float16's 4e-3 of the CPU's: the parity bench checks that; the gate multiplies its error by
  // the up projection's value, so the two are not compared after it). Up to 4 rows the ungated products
  // are asked of the wide kernel (CHORUS_QUANT_GEMV=wide), which sums as the gated one does (8-bit ones
  // of 2 to 4 rows go to the tensor-core GEMV by default where CHORUS_QUANT_BYTE_PAIRS=0).
  test('on CUDA: the wide kernels, the tensor-core tiles and the prefill\'s GEMM give the gate of their own products', { skip: cuda ? false : 'no CUDA device' }, () => {
    // The last two: a width that is not a multiple of a block's outputs, and more chunks of K than threads.
    for (const [bits, K, blockSize, N] of [[4, 512, 128, 96], [8, 512, 128, 96], [8, 4096, 128, 96], [4, 8224, 32, 26], [8, 8224, 32, 26]] as const) {
      for (const M of [1, 3, 4, 8, 16, 64, 100, 200]) {
        const c: Case = { M, K, N, bits, blockSize, zeroPoints: true, type: 'float16' };
        const { x, q } = inputs(c);
        const { gated, ungated } = gatedModels(c, q, roundTo(seeded(c.N, 5, 0.5), 'float16'));
        if (M <= 4) process.env.CHORUS_QUANT_GEMV = 'wide';
        let products: Float32Array;
        try {
          products = runGated(ungated, x, c, c.N, 'cuda');
        } finally {
          delete process.env.CHORUS_QUANT_GEMV;
        }
        // Past 128 rows the prefill's cuBLAS GEMM sums K in an order of its own: 6.3e-3 from the CPU's
        // sums seen at K 8224.
        assertClose(products, runGated(ungated, x, c, c.N, 'cpu'), M > 128 ? 1e-2 : 4e-3, `int${bits}, ${M} rows: the products`);
        const half = c.N / 2;
        const want = gateOf(products, M, c.N, 'float16');
        // One float16 rounding of the SiLU apart at most, times the up projection.
        assertClose(runGated(gated, x, c, half, 'cuda'), want, 2e-3, `int${bits}, ${M} rows: the gate of the products`);
      }
    }
  });
});

/** A QuantLinear with a pre-norm (residual and norm weights; y and the sum out), and the same without it. */
function preNormModels(c: Case, q: Quantized, norm: Float32Array, gated = false): { normed: string; plain: string } {
  const type = c.type ?? 'float32';
  const path = (withNorm: boolean): string => {
    const g = new GraphBuilder(type);
    const x = g.input('x', type, ['rows', c.K]);
    const w = quantizedConstants(g, c, q);
    const weights = [w.weight, w.scales];
    const zeroPoints = w.zeroPoints ?? '';
    const attributes = { K: c.K, N: c.N, bits: c.bits, block_size: c.blockSize, norm_epsilon: float(1e-5), ...(gated ? { gated: 1, activation: 'silu' } : {}) };
    const outputs = gated ? c.N / 2 : c.N;
    if (withNorm) {
      const residual = g.input('residual', type, ['rows', c.K]);
      const [y, sum] = g.opMany('QuantLinear', [x, ...weights, zeroPoints, '', '', residual, g.floatConstant([...norm], [c.K])], attributes, { domain: 'chorus', outputs: 2 });
      g.output('y', y!, type, ['rows', outputs]);
      g.output('sum', sum!, type, ['rows', c.K]);
    } else {
      g.output('y', g.op('QuantLinear', [x, ...weights, zeroPoints], attributes, { domain: 'chorus' }), type, ['rows', outputs]);
    }
    const file = join(root, `${withNorm ? 'normed' : 'plain'}${gated ? '-gated' : ''}-${JSON.stringify(c).replace(/[^a-z0-9]+/gi, '_')}.onnx`);
    writeFileSync(file, g.serialize().model);
    return file;
  };
  return { normed: path(true), plain: path(false) };
}

// 8-bit float16 steps of 17 to 64 rows run on Hopper's warpgroup instructions (quant-wgmma.cu) where the
// GPU has them and the shape fits (outputs a multiple of 128, gated 64; K and the block a multiple of
// 64), and on the register tiles with CHORUS_QUANT_WGMMA=0 or elsewhere. K 512 in blocks of 128 splits
// K over a cluster of 4 blocks, K 4096 in blocks of 256 over 8; the zero points vary by block.
describe('8-bit QuantLinear at batch decode steps (17 to 64 rows)', { skip }, () => {
  test('on CUDA: ungated and gated, on warpgroup instructions and on the register tiles, against the CPU', { skip: cuda ? false : 'no CUDA device' }, () => {
    for (const [K, blockSize, N, zeroPoints] of [[512, 128, 256, true], [4096, 256, 256, false], [4096, 256, 384, true]] as const) {
      for (const M of [17, 40, 64]) {
        const c: Case = { M, K, N, bits: 8, blockSize, zeroPoints, type: 'float16' };
        const { x, q } = inputs(c);
        const { gated, ungated } = gatedModels(c, q, roundTo(seeded(c.N, 5, 0.5), 'float16'));
        const want = runGated(ungated, x, c, c.N, 'cpu');
        const onTiles = (path: string, outputs: number): Float32Array => {
          process.env.CHORUS_QUANT_WGMMA = '0';
          try {
            return runGated(path, x, c, outputs, 'cuda');
          } finally {
            delete process.env.CHORUS_QUANT_WGMMA;
          }
        };
        const products = runGated(ungated, x, c, c.N, 'cuda');
        const label = `K ${K}, N ${N}, ${M} rows`;
        assertClose(products, want, 4e-3, `${label}: the products`);
        assertClose(onTiles(ungated, c.N), want, 4e-3, `${label}: the products on the tiles`);
        const half = c.N / 2;
        // Each path's gate against the gate of its own products (one float16 rounding of the SiLU apart
        // at most, times the up projection).
        assertClose(runGated(gated, x, c, half, 'cuda'), gateOf(products, M, c.N, 'float16'), 2e-3, `${label}: the gate`);
        assertClose(onTiles(gated, half), gateOf(onTiles(ungated, c.N), M, c.N, 'float16'), 2e-3, `${label}: the gate on the tiles`);
      }
    }
  });
});

describe('QuantLinear with a pre-norm (a residual norm folded into it)', { skip }, () => {
  const type = 'float16';
  const tensors = (c: Case, x: Float32Array, residual?: Float32Array): GraphTensor[] => [
    { name: 'x', type, dims: [c.M, c.K], data: encodeFloats(x, type) },
    ...(residual === undefined ? [] : [{ name: 'residual', type, dims: [c.M, c.K], data: encodeFloats(residual, type) } as GraphTensor]),
  ];
  const run = (path: string, c: Case, provider: 'cpu' | 'cuda', x: Float32Array, residual?: Float32Array): Float32Array[] =>
    addon!.runGraph({ model: path, provider, dtype: 'fp16', ...(provider === 'cuda' ? { cudaGraph: true, iterations: 1 } : {}) }, tensors(c, x, residual)).outputs.map((o) => decodeRaw(o.data, 'F16'));
  const setup = (M: number, K: number, gated = false, blockSize = 128, bits: 4 | 8 = 4) => {
    const c: Case = { M, K, N: 72, bits, blockSize, zeroPoints: true, type };
    const q = quantize(seeded(c.N * c.K, 7, 0.2), c.N, c.K, bits, blockSize, true, type);
    const norm = roundTo(seeded(K, 13, 0.5).map((v) => 1 + v), type);
    const x = roundTo(seeded(M * K, 3 + M, 2), type);
    const residual = roundTo(seeded(M * K, 5 + M, 2), type);
    return { c, q, norm, x, residual, ...preNormModels(c, q, norm, gated) };
  };

  test('on the CPU: the sum is x + residual rounded, and y the product of RMSNorm(sum) * norm, rounded as transformers rounds it', () => {
    const { c, norm, x, residual, normed, plain } = setup(3, 256);
    const [y, sum] = run(normed, c, 'cpu', x, residual);
    const want = roundTo(x.map((v, i) => v + residual[i]!), type);
    assert.deepEqual([...sum!], [...want]);
    const rows = new Float32Array(c.M * c.K);
    for (let r = 0; r < c.M; r++) {
      const row = want.subarray(r * c.K, (r + 1) * c.K);
      const inverse = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / c.K + 1e-5);
      rows.set(roundTo(roundTo(row.map((v) => v * inverse), type).map((v, k) => v * norm[k]!), type), r * c.K);
    }
    // The normed rows through the plain QuantLinear: the same but for the inverse root's last bits.
    assertClose(y!, run(plain, c, 'cpu', rows)[0]!, 2e-3, 'y against the plain product of the normed rows');
  });

  // Up to 4 rows the float16 kernels (4 and 8 bits) take the norm in themselves (scaling their sums by
  // the inverse root, the normed row not rounded on its way); more rows take the pre-norm pass first.
  test('on CUDA, against the CPU, in the kernel (1-4 rows) and as a pass of its own (8, 64 rows)', { skip: cuda ? false : 'no CUDA device' }, () => {
    for (const bits of [4, 8] as const) {
      for (const M of [1, 3, 4, 8, 64]) {
        const { c, x, residual, normed } = setup(M, 512, false, 128, bits);
        const [y, sum] = run(normed, c, 'cuda', x, residual);
        const [wantY, wantSum] = run(normed, c, 'cpu', x, residual);
        assert.deepEqual([...sum!], [...wantSum!], `int${bits}, ${M} rows: the sum`);
        assertClose(y!, wantY!, 8e-3, `int${bits}, ${M} rows: y`);
      }
    }
  });

  // Gated and pre-normed at once (a gated MLP after its norm), K of more chunks than a block's
  // threads: against the same pre-normed rows through the ungated operator on the device, gated here.
  test('on CUDA, gated with a pre-norm: the gate of the pre-normed products, and the sum', { skip: cuda ? false : 'no CUDA device' }, () => {
    for (const bits of [4, 8] as const) {
      for (const M of [1, 3, 8]) {
        const gated = setup(M, 8224, true, 32, bits);
        const ungated = setup(M, 8224, false, 32, bits);
        const [y, sum] = run(gated.normed, gated.c, 'cuda', gated.x, gated.residual);
        const [products, wantSum] = run(ungated.normed, ungated.c, 'cuda', ungated.x, ungated.residual);
        assert.deepEqual([...sum!], [...wantSum!], `int${bits}, ${M} rows: the sum`);
        assertClose(y!, gateOf(products!, M, gated.c.N, type), 2e-3, `int${bits}, ${M} rows: y`);
      }
    }
  });
});

describe('QuantLinear on the CPU', { skip }, () => {
  const cases: Case[] = [];
  for (const bits of [4, 8] as const) {
    for (const zeroPoints of [false, true]) {
      for (const blockSize of [32, 128]) cases.push({ M: 3, K: 200, N: 40, bits, blockSize, zeroPoints });
    }
  }
  for (const c of cases) {
    test(`int${c.bits}, block ${c.blockSize}, ${c.zeroPoints ? 'zero points' : 'symmetric'}, K ${c.K} (a partial last block): ONNX Runtime's MatMulNBits' outputs and the reference's`, async () => {
      const { x, q } = inputs(c);
      const got = runAddon(model(c, q, undefined, 'QuantLinear'), x, c);
      assertClose(got, await runOrt(model(c, q, undefined, 'MatMulNBits'), x, c), 1e-5, 'against MatMulNBits');
      assertClose(got, matmulReference(x, dequantize(q), c.M, c.K, c.N), 1e-5, 'against the reference');
    });
  }

  test('the bias and the activation are fused: MatMulNBits with its bias, then the activation, gives the same', async () => {
    for (const activation of ['silu', 'gelu_tanh', 'relu'] as const) {
      const c: Case = { M: 5, K: 96, N: 24, bits: 4, blockSize: 32, zeroPoints: true, bias: true, activation };
      const { x, q, bias } = inputs(c);
      const got = runAddon(model(c, q, bias, 'QuantLinear'), x, c);
      const ortOut = (await runOrt(model({ ...c, activation: undefined }, q, bias, 'MatMulNBits'), x, c)).map(ACTIVATIONS[activation]!);
      assertClose(got, ortOut, 1e-5, `${activation} against MatMulNBits`);
      assertClose(got, matmulReference(x, dequantize(q), c.M, c.K, c.N, bias, activation), 1e-5, `${activation} against the reference`);
    }
  });

  test('float16 and bfloat16 graphs: the reference rounded once (float32 sums), for one row and for many rows over several threads', () => {
    for (const type of ['float16', 'bfloat16'] as const) {
      for (const M of [1, 33]) {
        const c: Case = { M, K: 256, N: 72, bits: 8, blockSize: 128, zeroPoints: false, bias: true, activation: 'silu', type };
        const { x, q, bias } = inputs(c);
        const got = runAddon(model(c, q, bias, 'QuantLinear'), x, c, { intraOpThreads: 2 });
        // The sum rounded with its bias, then the activation of that, rounded.
        const sums = roundTo(matmulReference(x, dequantize(q), c.M, c.K, c.N, bias), type);
        const want = roundTo(sums.map(ACTIVATIONS.silu!), type);
        assertClose(got, want, type === 'float16' ? 2e-3 : 1.6e-2, `${type}, ${M} rows`);
      }
    }
  });

  test('float16 against MatMulNBits of float16', async () => {
    const c: Case = { M: 4, K: 160, N: 32, bits: 4, blockSize: 32, zeroPoints: true, type: 'float16' };
    const { x, q } = inputs(c);
    assertClose(runAddon(model(c, q, undefined, 'QuantLinear'), x, c), await runOrt(model(c, q, undefined, 'MatMulNBits'), x, c), 4e-3, 'against MatMulNBits');
  });

  test('refuses what it cannot take, by name', () => {
    const c: Case = { M: 2, K: 64, N: 8, bits: 4, blockSize: 32, zeroPoints: false };
    const { x, q } = inputs(c);
    const refused = (name: string, weight: readonly number[], weightDims: number[], extra: string[] = [], attributes: Record<string, number> = {}): string => {
      const g = new GraphBuilder('float32');
      const input = g.input('x', 'float32', ['rows', 64]);
      const scales = g.floatConstant([...q.scales], [8, 2]);
      const node = g.op('QuantLinear', [input, g.constantOf('uint8', weight, weightDims), scales, ...extra.map((e) => (e === '' ? '' : g.constantOf('int32', Array.from({ length: 64 }, (_, k) => k >> 5))))], {
        K: 64,
        N: 8,
        bits: 4,
        block_size: 32,
        ...attributes,
      }, { domain: 'chorus' });
      g.output('y', node, 'float32', ['rows', 8]);
      const path = join(root, `${name}.onnx`);
      writeFileSync(path, g.serialize().model);
      return path;
    };
    assert.throws(() => runAddon(refused('short', [...q.weight.subarray(0, 128)], [8, 1, 16]), x, c), /B must be \[N, ceil\(K \/ block_size\), block_size \* bits \/ 8\] = \[8, 2, 16\], got \[8, 1, 16\]/);
    assert.throws(() => runAddon(refused('g-idx', [...q.weight], [8, 2, 16], ['', 'g_idx']), x, c), /g_idx is not supported/);
    assert.throws(() => runAddon(refused('bits', [...q.weight], [8, 2, 16], [], { bits: 2 }), x, c), /bits must be 4 or 8, got 2/);
    assert.throws(() => quantLinear(new GraphBuilder('float32'), 'x', { weight: 'w', scales: 's' }, { K: 64, N: 8, bits: 3 as 4, blockSize: 32 }), /bits must be 4 or 8, got 3/);
    assert.throws(() => quantLinear(new GraphBuilder('float32'), 'x', { weight: 'w', scales: 's' }, { K: 64, N: 8, bits: 4, blockSize: 24 }), /blockSize must be a power of 2 of at least 16, got 24/);
    assert.throws(() => quantLinear(new GraphBuilder('float32'), 'x', { weight: 'w', scales: 's' }, { K: 64, N: 7, bits: 4, blockSize: 32 }, { gated: true }), /a gated QuantLinear's N must be even/);
    assert.throws(() => runAddon(refused('gated-odd', [...q.weight], [8, 2, 16], [], { N: 7, gated: 1 }), x, c), /a gated QuantLinear's N must be even \(the gate's rows, then the up projection's\), got 7/);
  });

  test('refuses a kernel knob of an unknown value by name, when a session is made', () => {
    const c: Case = { M: 2, K: 64, N: 8, bits: 4, blockSize: 32, zeroPoints: false };
    const { x, q } = inputs(c);
    const path = model(c, q, undefined, 'QuantLinear');
    for (const [name, value, message] of [
      ['CHORUS_QUANT_GEMV', 'fast', /CHORUS_QUANT_GEMV must be plain, mma or wide, not fast/],
      ['CHORUS_QUANT_TILES', 'tensor', /CHORUS_QUANT_TILES must be mma or wmma, not tensor/],
      ['CHORUS_QUANT_TILE_WARPS', '6', /CHORUS_QUANT_TILE_WARPS must be 4 or 8, not 6/],
      ['CHORUS_QUANT_BYTE_PAIRS', 'no', /CHORUS_QUANT_BYTE_PAIRS must be 0 or 1, not no/],
      ['CHORUS_QUANT_WGMMA', 'off', /CHORUS_QUANT_WGMMA must be 0 or 1, not off/],
    ] as const) {
      process.env[name] = value;
      try {
        assert.throws(() => runAddon(path, x, c), message);
      } finally {
        delete process.env[name];
      }
    }
    // The same knobs at their known values run.
    process.env.CHORUS_QUANT_TILE_WARPS = '8';
    process.env.CHORUS_QUANT_BYTE_PAIRS = '0';
    process.env.CHORUS_QUANT_WGMMA = '0';
    try {
      assert.equal(runAddon(path, x, c).length, c.M * c.N);
    } finally {
      delete process.env.CHORUS_QUANT_TILE_WARPS;
      delete process.env.CHORUS_QUANT_BYTE_PAIRS;
      delete process.env.CHORUS_QUANT_WGMMA;
    }
  });
});
