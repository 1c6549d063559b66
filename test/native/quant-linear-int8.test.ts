import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { decodeRaw, encodeFloats } from '../../src/modelbuild/float-bits.ts';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';
import { quantLinear } from '../../src/modelbuild/quant-linear-addon.ts';
import { loadNative } from '../../src/native/index.ts';
import { dequantize, matmulReference, quantize, seeded, type Quantized } from '../helpers/quant.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-quant-linear-int8-');

interface Case {
  M: number;
  K: number;
  N: number;
  blockSize: number;
  zeroPoints: boolean;
  bias?: boolean;
}

/** QuantLinear (8 bits, int8 activations) or MatMulNBits at accuracy_level 4, over q. */
function model(c: Case, q: Quantized, bias: Float32Array | undefined, op: 'QuantLinear' | 'MatMulNBits'): string {
  const g = new GraphBuilder('float32');
  const x = g.input('x', 'float32', ['rows', c.K]);
  const weight = g.constantOf('uint8', [...q.weight], [c.N, q.blocks, c.blockSize]);
  const scales = g.floatConstant([...q.scales], [c.N, q.blocks]);
  const zeroPoints = q.zeroPoints === undefined ? undefined : g.constantOf('uint8', [...q.zeroPoints], [q.zeroPoints.length]);
  const b = bias === undefined ? undefined : g.floatConstant([...bias], [c.N]);
  const y =
    op === 'QuantLinear'
      ? quantLinear(g, x, { weight, scales, ...(zeroPoints === undefined ? {} : { zeroPoints }) }, { K: c.K, N: c.N, bits: 8, blockSize: c.blockSize }, { accuracyLevel: 4, ...(b === undefined ? {} : { bias: b, activation: 'gelu_tanh' as const }) })
      : g.op('MatMulNBits', [x, weight, scales, zeroPoints ?? ''].filter((v) => v !== ''), { K: c.K, N: c.N, bits: 8, block_size: c.blockSize, accuracy_level: 4 }, { domain: 'com.microsoft' });
  g.output('y', y, 'float32', ['rows', c.N]);
  const path = join(root, `${op}-${JSON.stringify(c).replace(/[^a-z0-9]+/gi, '_')}.onnx`);
  writeFileSync(path, g.serialize().model);
  return path;
}

/** Round half to even, as the C library's nearbyint in its default mode. */
function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** x with each row quantized to int8 per block of K (its largest magnitude to 127), dequantized again, in float32 steps. */
function int8Rows(x: Float32Array, M: number, K: number, blockSize: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let m = 0; m < M; m++) {
    for (let first = 0; first < K; first += blockSize) {
      const block = x.subarray(m * K + first, m * K + Math.min(K, first + blockSize));
      const largest = block.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
      const scale = Math.fround(largest / 127);
      const inverse = largest > 0 ? Math.fround(127 / largest) : 0;
      block.forEach((v, j) => (out[m * K + first + j] = roundEven(Math.fround(v * inverse)) * scale));
    }
  }
  return out;
}

function worstError(got: Float32Array, want: Float32Array): number {
  assert.equal(got.length, want.length);
  return got.reduce((worst, v, i) => Math.max(worst, Math.abs(v - want[i]!) / (1 + Math.abs(want[i]!))), 0);
}

describe('QuantLinear on the CPU with int8 activations (accuracy_level 4)', { skip }, () => {
  after(() => delete process.env.CHORUS_QUANT_HOST);
  const run = (path: string, x: Float32Array, c: Case, threads?: number): Float32Array => {
    const { outputs } = addon!.runGraph({ model: path, provider: 'cpu', dtype: 'fp32', ...(threads === undefined ? {} : { intraOpThreads: threads }) }, [{ name: 'x', type: 'float32', dims: [c.M, c.K], data: encodeFloats(x, 'float32') }]);
    assert.deepEqual(outputs[0]!.dims, [c.M, c.N]);
    return decodeRaw(outputs[0]!.data, 'F32');
  };
  const cases: Case[] = [];
  for (const blockSize of [16, 32, 128]) {
    for (const zeroPoints of [false, true]) cases.push({ M: 6, K: 200, N: 40, blockSize, zeroPoints });
  }
  cases.push({ M: 1, K: 256, N: 33, blockSize: 256, zeroPoints: false, bias: true });
  for (const path of ['the best the CPU has', 'AVX2']) {
    for (const c of cases) {
      test(`${path}: block ${c.blockSize}, ${c.zeroPoints ? 'zero points' : 'symmetric'}, ${c.M} rows, K ${c.K}${c.bias ? ', bias and gelu' : ''}: the reference over int8 activations`, () => {
        if (path === 'AVX2') process.env.CHORUS_QUANT_HOST = 'avx2';
        else delete process.env.CHORUS_QUANT_HOST;
        const x = seeded(c.M * c.K, 11 + c.K);
        const q = quantize(seeded(c.N * c.K, 7 + c.N, 0.2), c.N, c.K, 8, c.blockSize, c.zeroPoints);
        const bias = c.bias === true ? seeded(c.N, 5, 0.5) : undefined;
        const got = run(model(c, q, bias, 'QuantLinear'), x, c, 2);
        const want = matmulReference(int8Rows(x, c.M, c.K, c.blockSize), dequantize(q), c.M, c.K, c.N, bias, bias === undefined ? undefined : 'gelu_tanh');
        assert.ok(worstError(got, want) <= 1e-5, `relative error ${worstError(got, want)}`);
        // Not the float path: activations rounded to 8 bits move the sums by far more than float32 rounding.
        assert.ok(worstError(got, matmulReference(x, dequantize(q), c.M, c.K, c.N, bias, bias === undefined ? undefined : 'gelu_tanh')) > 1e-4);
      });
    }
  }

  test("rows are quantized alone: one row's outputs are the same in a step of one and of six rows", () => {
    delete process.env.CHORUS_QUANT_HOST;
    const c: Case = { M: 6, K: 192, N: 24, blockSize: 64, zeroPoints: false };
    const x = seeded(c.M * c.K, 3);
    const q = quantize(seeded(c.N * c.K, 9, 0.2), c.N, c.K, 8, c.blockSize, false);
    const path = model(c, q, undefined, 'QuantLinear');
    const all = run(path, x, c);
    const last = run(path, x.slice(5 * c.K), { ...c, M: 1 });
    assert.deepEqual([...last], [...all.subarray(5 * c.N)]);
  });

  test("ONNX Runtime's MatMulNBits at accuracy_level 4 gives about the same", async () => {
    delete process.env.CHORUS_QUANT_HOST;
    const c: Case = { M: 3, K: 256, N: 48, blockSize: 128, zeroPoints: false };
    const x = seeded(c.M * c.K, 21);
    const q = quantize(seeded(c.N * c.K, 23, 0.2), c.N, c.K, 8, c.blockSize, false);
    const session = await ort.InferenceSession.create(model(c, q, undefined, 'MatMulNBits'), { executionProviders: ['cpu'] });
    const { y } = await session.run({ x: new ort.Tensor('float32', x, [c.M, c.K]) });
    await session.release();
    assert.ok(worstError(run(model(c, q, undefined, 'QuantLinear'), x, c), y!.data as Float32Array) <= 2e-3);
  });
});
