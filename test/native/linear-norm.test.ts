/**
 * The addon's Linear with a pre-norm (residual and RMSNorm weight as inputs 3 and 4, the sum as output
 * 1; a post-norm of x as input 5, Gemma 2's), which the slot decoders fold their norms into: against a reference in float64 that rounds where
 * transformers' half-precision RMSNorm does, on the CPU; on CUDA too where a device is present (the
 * kernel's path up to 4 rows, the separate pass with the kernel or cuBLAS past it), against the host's.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { decodeRaw, encodeFloats, type FloatType } from '../../src/modelbuild/float-bits.ts';
import { float, GraphBuilder } from '../../src/modelbuild/graph.ts';
import { loadNative, type GraphTensor } from '../../src/native/index.ts';
import { ACTIVATIONS, roundTo, seeded } from '../helpers/quant.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const cuda = addon !== undefined && addon.cuda && addon.cudaDevices() > 0;
const root = scratchDir('chorus-linear-norm-');
const DTYPES: Record<FloatType, 'fp32' | 'fp16' | 'bf16'> = { float32: 'fp32', float16: 'fp16', bfloat16: 'bf16' };
const RAW: Record<FloatType, 'F32' | 'F16' | 'BF16'> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };
const EPSILON = 1e-5;
const POST_EPSILON = 1e-6;

interface Case {
  rows: number;
  in: number;
  out: number;
  type: FloatType;
  residual: boolean;
  gated?: boolean;
  bias?: boolean;
  /** A post-norm of x before the residual joins it. */
  post?: boolean;
  /** y soft-capped: softcap * tanh(y / softcap). */
  softcap?: number;
}

interface Weights {
  weight: Float32Array;
  bias?: Float32Array;
  norm: Float32Array;
  post?: Float32Array;
}

function weightsOf(c: Case): Weights {
  const products = c.gated === true ? 2 * c.out : c.out;
  return {
    weight: roundTo(seeded(products * c.in, 7 + c.in, 1 / Math.sqrt(c.in)), c.type),
    ...(c.bias === true ? { bias: roundTo(seeded(products, 11, 0.5), c.type) } : {}),
    norm: roundTo(seeded(c.in, 13, 0.5).map((v) => 1 + v), c.type),
    ...(c.post === true ? { post: roundTo(seeded(c.in, 17, 0.5).map((v) => 1 + v), c.type) } : {}),
  };
}

/** A graph of one pre-normed Linear: x and residual in, y and the sum out. */
function model(c: Case, w: Weights): string {
  const g = new GraphBuilder(c.type);
  const x = g.input('x', c.type, ['rows', c.in]);
  const residual = c.residual ? g.input('residual', c.type, ['rows', c.in]) : '';
  const products = c.gated === true ? 2 * c.out : c.out;
  const inputs = [x, g.floatConstant([...w.weight], [products, c.in]), w.bias === undefined ? '' : g.floatConstant([...w.bias], [products]), residual, g.floatConstant([...w.norm], [c.in])];
  if (w.post !== undefined) inputs.push(g.floatConstant([...w.post], [c.in]));
  const attributes = {
    norm_epsilon: float(EPSILON),
    ...(w.post === undefined ? {} : { post_norm_epsilon: float(POST_EPSILON) }),
    ...(c.gated === true ? { gated: 1, activation: 'silu' } : {}),
    ...(c.softcap === undefined ? {} : { softcap: float(c.softcap) }),
  };
  const [y, sum] = g.opMany('Linear', inputs, attributes, { domain: 'chorus', outputs: c.residual ? 2 : 1 });
  g.output('y', y!, c.type, ['rows', c.out]);
  if (c.residual) g.output('sum', sum!, c.type, ['rows', c.in]);
  const path = join(root, `${JSON.stringify(c).replace(/[^a-z0-9]+/gi, '_')}.onnx`);
  writeFileSync(path, g.serialize().model);
  return path;
}

/** y and the sum in float64, rounded where transformers rounds: the sum, the normed value, its scaled value, each product with its bias. */
function reference(c: Case, w: Weights, given: Float32Array, residual: Float32Array): { y: Float32Array; sum: Float32Array } {
  // A post-norm: each row of x normed on its own, rounded once (transformers' Gemma2RMSNorm).
  const x = new Float32Array(given);
  if (w.post !== undefined) {
    for (let r = 0; r < c.rows; r++) {
      const row = given.subarray(r * c.in, (r + 1) * c.in);
      const inverse = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / c.in + POST_EPSILON);
      x.set(roundTo(row.map((v, k) => v * inverse * w.post![k]!), c.type), r * c.in);
    }
  }
  const sum = c.residual ? roundTo(x.map((v, i) => v + residual[i]!), c.type) : x;
  const normed = new Float32Array(c.rows * c.in);
  for (let r = 0; r < c.rows; r++) {
    const row = sum.subarray(r * c.in, (r + 1) * c.in);
    const inverse = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / c.in + EPSILON);
    const scaled = roundTo(row.map((v) => v * inverse), c.type);
    normed.set(roundTo(scaled.map((v, k) => v * w.norm[k]!), c.type), r * c.in);
  }
  const product = (r: number, o: number): number => {
    let total = w.bias?.[o] ?? 0;
    for (let k = 0; k < c.in; k++) total += normed[r * c.in + k]! * w.weight[o * c.in + k]!;
    return roundTo(Float32Array.of(total), c.type)[0]!;
  };
  const y = new Float32Array(c.rows * c.out);
  for (let r = 0; r < c.rows; r++) {
    for (let o = 0; o < c.out; o++) {
      if (c.gated === true) {
        const gate = roundTo(Float32Array.of(ACTIVATIONS.silu!(product(r, o))), c.type)[0]!;
        y[r * c.out + o] = roundTo(Float32Array.of(gate * product(r, c.out + o)), c.type)[0]!;
      } else if (c.softcap !== undefined) {
        // Rounded after the division, the tanh and the product, as transformers' three operators.
        const round = (v: number): number => roundTo(Float32Array.of(v), c.type)[0]!;
        y[r * c.out + o] = round(round(Math.tanh(round(product(r, o) / c.softcap))) * c.softcap);
      } else {
        y[r * c.out + o] = product(r, o);
      }
    }
  }
  return { y, sum };
}

function run(path: string, c: Case, x: Float32Array, residual: Float32Array, provider: 'cpu' | 'cuda'): { y: Float32Array; sum?: Float32Array } {
  const tensor = (name: string, values: Float32Array): GraphTensor => ({ name, type: c.type, dims: [c.rows, c.in], data: encodeFloats(values, c.type) });
  const { outputs } = addon!.runGraph({ model: path, provider, dtype: DTYPES[c.type] }, [tensor('x', x), ...(c.residual ? [tensor('residual', residual)] : [])]);
  assert.deepEqual(outputs[0]!.dims, [c.rows, c.out]);
  return { y: decodeRaw(outputs[0]!.data, RAW[c.type]), ...(c.residual ? { sum: decodeRaw(outputs[1]!.data, RAW[c.type]) } : {}) };
}

/** The largest difference, in units of the largest magnitude of `expected`. */
function relative(actual: Float32Array, expected: Float32Array): number {
  const scale = expected.reduce((m, v) => Math.max(m, Math.abs(v)), 0) || 1;
  return actual.reduce((m, v, i) => Math.max(m, Math.abs(v - expected[i]!)), 0) / scale;
}

/** A rounding step of the type, relative: what one last-bit difference in an output costs. */
const ULP: Record<FloatType, number> = { float32: 2 ** -23, float16: 2 ** -10, bfloat16: 2 ** -7 };

const CASES: Case[] = [
  { rows: 1, in: 64, out: 40, type: 'float32', residual: true },
  { rows: 3, in: 128, out: 24, type: 'float16', residual: true, bias: true },
  { rows: 2, in: 64, out: 16, type: 'bfloat16', residual: true, gated: true },
  { rows: 1, in: 96, out: 32, type: 'float16', residual: false },
  { rows: 12, in: 64, out: 48, type: 'float16', residual: true, gated: true },
  { rows: 5, in: 60, out: 20, type: 'float16', residual: true },
  { rows: 4, in: 256, out: 24, type: 'bfloat16', residual: true, bias: true },
  { rows: 6, in: 64, out: 16, type: 'float16', residual: true },
  { rows: 40, in: 2048, out: 8, type: 'float16', residual: true },
  // Past 4 rows a gated product's gate is its own pass: 16 bytes a thread (out a whole number of
  // vectors), else an element a thread.
  { rows: 9, in: 64, out: 20, type: 'float32', residual: true, gated: true, bias: true },
  { rows: 7, in: 64, out: 12, type: 'float16', residual: true, gated: true },
  { rows: 10, in: 64, out: 24, type: 'bfloat16', residual: true, gated: true },
  // One row: the kernel's 8 outputs a block, past the last output and gated.
  { rows: 1, in: 128, out: 20, type: 'float16', residual: true, gated: true, bias: true },
  { rows: 1, in: 256, out: 44, type: 'bfloat16', residual: true },
  // A post-norm too: the kernel's one row (gated, 8 outputs a block) and several, the separate pass past 4.
  { rows: 1, in: 256, out: 44, type: 'bfloat16', residual: true, post: true, gated: true },
  { rows: 1, in: 128, out: 24, type: 'float16', residual: true, post: true },
  { rows: 3, in: 64, out: 16, type: 'bfloat16', residual: true, post: true, bias: true },
  { rows: 6, in: 64, out: 20, type: 'float16', residual: true, post: true },
  { rows: 12, in: 60, out: 8, type: 'float32', residual: true, post: true },
  // Rows of 120 bytes: the separate pass element by element; and float32's kernel.
  { rows: 6, in: 60, out: 12, type: 'float16', residual: true, post: true },
  { rows: 1, in: 64, out: 20, type: 'float32', residual: true, post: true },
  // One row of 288 or 384 16-byte vectors (Gemma 2's 2,304 and 9,216 wide rows, Phi-3's 3,072): on the
  // device, blocks of as many threads.
  { rows: 1, in: 2304, out: 20, type: 'float16', residual: true, gated: true },
  { rows: 1, in: 2304, out: 12, type: 'bfloat16', residual: false },
  { rows: 1, in: 9216, out: 12, type: 'bfloat16', residual: false, bias: true },
  { rows: 1, in: 3072, out: 24, type: 'float16', residual: true, post: true },
  { rows: 1, in: 1152, out: 8, type: 'float32', residual: true },
  // Soft-capped (Gemma 2's head): the kernel's one row and several, and past them the pass after the
  // GEMM, 16 bytes a thread and (13 outputs) an element a thread.
  { rows: 1, in: 2304, out: 12, type: 'bfloat16', residual: false, softcap: 1.5 },
  { rows: 3, in: 64, out: 24, type: 'float16', residual: true, post: true, softcap: 1.5 },
  { rows: 2, in: 64, out: 20, type: 'float32', residual: false, bias: true, softcap: 1.5 },
  { rows: 12, in: 64, out: 24, type: 'float16', residual: true, softcap: 1.5 },
  { rows: 9, in: 64, out: 13, type: 'bfloat16', residual: false, bias: true, softcap: 1.5 },
];

describe('Linear with a pre-norm', { skip }, () => {
  for (const c of CASES) {
    const name = `${c.type}, ${c.rows} rows, in ${c.in}, out ${c.out}${c.residual ? ', with a residual' : ''}${c.post === true ? ', a post-norm' : ''}${c.gated === true ? ', gated' : ''}${c.bias === true ? ', bias' : ''}${c.softcap === undefined ? '' : `, soft cap ${c.softcap}`}`;
    test(`${name}: the host's y and sum are the reference's`, () => {
      const w = weightsOf(c);
      const x = roundTo(seeded(c.rows * c.in, 3 + c.rows, 2), c.type);
      const residual = roundTo(seeded(c.rows * c.in, 5 + c.rows, 2), c.type);
      const path = model(c, w);
      const expected = reference(c, w, x, residual);
      const host = run(path, c, x, residual, 'cpu');
      // The host sums in float32, the reference in float64: a last-bit difference at most.
      assert.ok(relative(host.y, expected.y) <= 2 * ULP[c.type] + 1e-6, `y differs by ${relative(host.y, expected.y)}`);
      // A post-normed x is rounded from float32 on the host and from float64 here: where the two fall on
      // either side of a rounding boundary, a sum differs in its last bit.
      if (c.residual && c.post === true) assert.ok(relative(host.sum!, expected.sum) <= 2 * ULP[c.type], `the sum differs by ${relative(host.sum!, expected.sum)}`);
      else if (c.residual) assert.deepEqual([...host.sum!], [...expected.sum]);
      if (!cuda) return;
      // The device's kernel takes the normed row unrounded on its way (up to 4 rows): a few last bits.
      const device = run(path, c, x, residual, 'cuda');
      assert.ok(relative(device.y, host.y) <= 8 * ULP[c.type] + 1e-5, `the device's y differs from the host's by ${relative(device.y, host.y)}`);
      if (c.residual && c.post === true) assert.ok(relative(device.sum!, host.sum!) <= 2 * ULP[c.type], `the device's sum differs from the host's by ${relative(device.sum!, host.sum!)}`);
      else if (c.residual) assert.deepEqual([...device.sum!], [...host.sum!]);
    });
  }

  test("last: a prefill's x [batch, sequence, in] taken at each row's last position, as the same Linear of those rows alone", () => {
    for (const [type, rows] of [
      ['float16', 2],
      ['bfloat16', 2],
      ['float32', 2],
      ['float16', 6],
    ] as const) {
      const c: Case = { rows, in: 64, out: 24, type, residual: true, post: type !== 'float32' };
      const w = weightsOf(c);
      const positions = 3;
      const x = roundTo(seeded(c.rows * positions * c.in, 23, 2), type);
      const residual = roundTo(seeded(c.rows * positions * c.in, 29, 2), type);
      const g = new GraphBuilder(type);
      const xs = g.input('x', type, ['batch', 'sequence', c.in]);
      const rs = g.input('residual', type, ['batch', 'sequence', c.in]);
      const inputs = [xs, g.floatConstant([...w.weight], [c.out, c.in]), '', rs, g.floatConstant([...w.norm], [c.in]), ...(w.post === undefined ? [] : [g.floatConstant([...w.post], [c.in])])];
      const attributes = { norm_epsilon: float(EPSILON), post_norm_epsilon: float(POST_EPSILON), last: 1 };
      g.output('y', g.op('Linear', inputs, attributes, { domain: 'chorus' }), type, ['batch', 1, c.out]);
      const path = join(root, `last-${type}-${rows}.onnx`);
      writeFileSync(path, g.serialize().model);
      const lastRows = (values: Float32Array): Float32Array => {
        const out = new Float32Array(c.rows * c.in);
        for (let r = 0; r < c.rows; r++) out.set(values.subarray(((r + 1) * positions - 1) * c.in, (r + 1) * positions * c.in), r * c.in);
        return out;
      };
      const expected = reference(c, w, lastRows(x), lastRows(residual)).y;
      for (const provider of cuda ? (['cpu', 'cuda'] as const) : (['cpu'] as const)) {
        for (const [seq, xv, rv] of [
          [positions, x, residual],
          [1, lastRows(x), lastRows(residual)],
        ] as const) {
          const tensor = (name: string, values: Float32Array): GraphTensor => ({ name, type, dims: [c.rows, seq, c.in], data: encodeFloats(values, type) });
          const { outputs } = addon!.runGraph({ model: path, provider, dtype: DTYPES[type] }, [tensor('x', xv), tensor('residual', rv)]);
          assert.deepEqual(outputs[0]!.dims, [c.rows, 1, c.out]);
          const y = decodeRaw(outputs[0]!.data, RAW[type]);
          assert.ok(relative(y, expected) <= 8 * ULP[type] + 1e-5, `${type} on ${provider}, ${seq} positions: y differs by ${relative(y, expected)}`);
        }
      }
    }
  });

  test("last_index: each row's x (and residual) taken at the position it names, a decode step's one position as it is", () => {
    const positions = 5;
    const index = [2, 0, 4];
    const lastIndexOf = (values: number[]): GraphTensor => ({ name: 'last_index', type: 'int32', dims: [values.length], data: new Uint8Array(Int32Array.from(values).buffer) });
    const at = (values: Float32Array, c: Case, picks: number[]): Float32Array => {
      const out = new Float32Array(c.rows * c.in);
      picks.forEach((p, r) => out.set(values.subarray((r * positions + p) * c.in, (r * positions + p + 1) * c.in), r * c.in));
      return out;
    };
    // Pre-normed with a residual (and a post-norm in float16), and a plain product with a bias.
    for (const c of [
      { rows: 3, in: 64, out: 24, type: 'float16', residual: true, post: true },
      { rows: 3, in: 64, out: 24, type: 'bfloat16', residual: true },
      { rows: 3, in: 32, out: 20, type: 'float32', residual: false, bias: true },
    ] as Case[]) {
      const w = weightsOf(c);
      const x = roundTo(seeded(c.rows * positions * c.in, 31, 2), c.type);
      const residual = roundTo(seeded(c.rows * positions * c.in, 37, 2), c.type);
      const g = new GraphBuilder(c.type);
      const xs = g.input('x', c.type, ['batch', 'sequence', c.in]);
      const rs = c.residual ? g.input('residual', c.type, ['batch', 'sequence', c.in]) : '';
      const li = g.input('last_index', 'int32', ['batch']);
      const bias = w.bias === undefined ? '' : g.floatConstant([...w.bias], [c.out]);
      const norm = c.residual ? g.floatConstant([...w.norm], [c.in]) : '';
      const post = w.post === undefined ? '' : g.floatConstant([...w.post], [c.in]);
      const attributes = { last: 1, ...(c.residual ? { norm_epsilon: float(EPSILON), post_norm_epsilon: float(POST_EPSILON) } : {}) };
      g.output('y', g.op('Linear', [xs, g.floatConstant([...w.weight], [c.out, c.in]), bias, rs, norm, post, li], attributes, { domain: 'chorus' }), c.type, ['batch', 1, c.out]);
      const path = join(root, `last-index-${c.type}.onnx`);
      writeFileSync(path, g.serialize().model);
      // The reference in float64: the pre-norm's, or each product with its bias rounded once.
      const plain = (rows: Float32Array): Float32Array => {
        const y = new Float32Array(c.rows * c.out);
        for (let r = 0; r < c.rows; r++) {
          for (let o = 0; o < c.out; o++) {
            let total = w.bias?.[o] ?? 0;
            for (let k = 0; k < c.in; k++) total += rows[r * c.in + k]! * w.weight[o * c.in + k]!;
            y[r * c.out + o] = roundTo(Float32Array.of(total), c.type)[0]!;
          }
        }
        return y;
      };
      const expected = c.residual ? reference(c, w, at(x, c, index), at(residual, c, index)).y : plain(at(x, c, index));
      for (const provider of cuda ? (['cpu', 'cuda'] as const) : (['cpu'] as const)) {
        for (const [seq, xv, rv, picks] of [
          [positions, x, residual, index],
          // One position: the index unread (here past the sequence).
          [1, at(x, c, index), at(residual, c, index), [7, 7, 7]],
        ] as const) {
          const tensor = (name: string, values: Float32Array): GraphTensor => ({ name, type: c.type, dims: [c.rows, seq, c.in], data: encodeFloats(values, c.type) });
          const inputs = [tensor('x', xv), ...(c.residual ? [tensor('residual', rv)] : []), lastIndexOf([...picks])];
          const { outputs } = addon!.runGraph({ model: path, provider, dtype: DTYPES[c.type] }, inputs);
          assert.deepEqual(outputs[0]!.dims, [c.rows, 1, c.out]);
          const y = decodeRaw(outputs[0]!.data, RAW[c.type]);
          assert.ok(relative(y, expected) <= 8 * ULP[c.type] + 1e-5, `${c.type} on ${provider}, ${seq} positions: y differs by ${relative(y, expected)}`);
        }
      }
      if (c.type !== 'float32') continue;
      // The host checks each index against the sequence, and the index's shape.
      const tensor = (name: string, values: Float32Array): GraphTensor => ({ name, type: c.type, dims: [c.rows, positions, c.in], data: encodeFloats(values, c.type) });
      const runWith = (picks: number[]): unknown => addon!.runGraph({ model: path, provider: 'cpu', dtype: 'fp32' }, [tensor('x', x), lastIndexOf(picks)]);
      assert.throws(() => runWith([2, 5, 0]), /last_index of row 1 is 5, outside 0\.\.4/);
      assert.throws(() => runWith([2, 0, -1]), /last_index of row 2 is -1, outside 0\.\.4/);
      assert.throws(() => runWith([2, 0]), /last_index must be \[batch\] \(3\), not \[2\]/);
    }
    // last_index goes with last.
    const c: Case = { rows: 2, in: 16, out: 8, type: 'float32', residual: false };
    const g = new GraphBuilder('float32');
    const xs = g.input('x', 'float32', ['batch', 'sequence', 16]);
    const li = g.input('last_index', 'int32', ['batch']);
    g.output('y', g.op('Linear', [xs, g.floatConstant([...weightsOf(c).weight], [8, 16]), '', '', '', '', li], {}, { domain: 'chorus' }), 'float32', ['batch', 'sequence', 8]);
    const path = join(root, 'last-index-without-last.onnx');
    writeFileSync(path, g.serialize().model);
    const x: GraphTensor = { name: 'x', type: 'float32', dims: [2, 3, 16], data: encodeFloats(seeded(96, 3), 'float32') };
    assert.throws(() => addon!.runGraph({ model: path, provider: 'cpu', dtype: 'fp32' }, [x, lastIndexOf([0, 1])]), /last_index \(input 6\) goes with last=1/);
  });

  test('refuses a norm or post-norm weight of the wrong size, a residual or post-norm without a norm, and last on x of two axes, a residual of another shape or a sum, naming them', () => {
    const c: Case = { rows: 1, in: 16, out: 8, type: 'float32', residual: false };
    const x = seeded(16, 1);
    const one = (name: string, norm: number[] | undefined, post?: number[]): string => {
      const g = new GraphBuilder('float32');
      const input = g.input('x', 'float32', ['rows', 16]);
      const weights = (values: number[] | undefined): string => (values === undefined ? '' : g.floatConstant(values, [values.length]));
      const inputs = [input, g.floatConstant([...weightsOf(c).weight], [8, 16]), '', post === undefined ? input : '', weights(norm), ...(post === undefined ? [] : [weights(post)])];
      g.output('y', g.op('Linear', inputs, {}, { domain: 'chorus' }), 'float32', ['rows', 8]);
      const path = join(root, `${name}.onnx`);
      writeFileSync(path, g.serialize().model);
      return path;
    };
    assert.throws(() => run(one('short-norm', new Array<number>(8).fill(1)), c, x, x, 'cpu'), /norm must be \[in\] \(16\)/);
    assert.throws(() => run(one('residual-alone', undefined), c, x, x, 'cpu'), /a residual \(input 3\) goes with a norm's weight \(input 4\)/);
    const ones = (n: number): number[] => new Array<number>(n).fill(1);
    // last: x of three axes, a residual of x's own shape, and no sum.
    const lastOf = (name: string, dims: number[], residualDims: number[], outputs: number): string => {
      const g = new GraphBuilder('float32');
      const input = g.input('x', 'float32', dims);
      const residual = g.input('residual', 'float32', residualDims);
      const ys = g.opMany('Linear', [input, g.floatConstant([...weightsOf(c).weight], [8, 16]), '', residual, g.floatConstant(ones(16), [16])], { last: 1 }, { domain: 'chorus', outputs });
      ys.forEach((y, i) => g.output(i === 0 ? 'y' : 'sum', y, 'float32', i === 0 ? ['rows', 8] : dims));
      const path = join(root, `${name}.onnx`);
      writeFileSync(path, g.serialize().model);
      return path;
    };
    const runLast = (path: string, dims: number[], residualDims: number[]): void => {
      const tensor = (name: string, shape: number[]): GraphTensor => ({ name, type: 'float32', dims: shape, data: encodeFloats(seeded(shape.reduce((a, b) => a * b, 1), 3), 'float32') });
      addon!.runGraph({ model: path, provider: 'cpu', dtype: 'fp32' }, [tensor('x', dims), tensor('residual', residualDims)]);
    };
    assert.throws(() => runLast(lastOf('last-2d', [2, 16], [2, 16], 1), [2, 16], [2, 16]), /a Linear with last takes x \[batch, sequence, in\], not 2 axes/);
    assert.throws(() => runLast(lastOf('last-residual', [2, 3, 16], [2, 1, 16], 1), [2, 3, 16], [2, 1, 16]), /residual must have x's shape/);
    assert.throws(() => runLast(lastOf('last-sum', [2, 3, 16], [2, 3, 16], 2), [2, 3, 16], [2, 3, 16]), /a Linear with last has no sum output/);
    assert.throws(() => run(one('short-post-norm', ones(16), ones(12)), c, x, x, 'cpu'), /post_norm must be \[in\] \(16\)/);
    assert.throws(() => run(one('post-norm-alone', undefined, ones(16)), c, x, x, 'cpu'), /a post_norm \(input 5\) goes with a norm's weight \(input 4\)/);
  });

  test('refuses a negative soft cap and a soft cap on a gated product, naming softcap', () => {
    const x = seeded(16, 1);
    for (const [c, message] of [
      [{ rows: 1, in: 16, out: 8, type: 'float32', residual: false, softcap: -2 }, /softcap must be a finite number >= 0 \(0: none\), not -2/],
      [{ rows: 1, in: 16, out: 8, type: 'float32', residual: false, gated: true, softcap: 2 }, /softcap is not taken with gated/],
    ] as Array<[Case, RegExp]>) {
      assert.throws(() => run(model(c, weightsOf(c)), c, x, x, 'cpu'), message);
    }
  });
});
