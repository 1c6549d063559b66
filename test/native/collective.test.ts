import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { decodeRaw, encodeFloats, type FloatType } from '../../src/modelbuild/float-bits.ts';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';
import { loadNative, type GraphTensor } from '../../src/native/index.ts';
import { seeded } from '../helpers/quant.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-collective-');
const DTYPES: Record<FloatType, 'fp32' | 'fp16' | 'bf16'> = { float32: 'fp32', float16: 'fp16', bfloat16: 'bf16' };
const RAW: Record<FloatType, 'F32' | 'F16' | 'BF16'> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };

/** x [rows, n] -> sum = AllReduce(x), gathered = AllGather(x) [rows, n * world]. */
function model(type: FloatType, world: number): string {
  const g = new GraphBuilder(type);
  const x = g.input('x', type, ['rows', 'n']);
  g.output('sum', g.op('AllReduce', [x], { world_size: world }, { domain: 'chorus' }), type, ['rows', 'n']);
  g.output('gathered', g.op('AllGather', [x], { world_size: world }, { domain: 'chorus' }), type, ['rows', 'gathered_n']);
  const path = join(root, `collectives-${type}-${world}.onnx`);
  writeFileSync(path, g.serialize().model);
  return path;
}

/** Values of the type (rounded to it), seeded per rank. */
function values(count: number, seed: number, type: FloatType): Float32Array {
  return decodeRaw(encodeFloats(seeded(count, seed, 2), type), RAW[type]);
}

function tensor(x: Float32Array, rows: number, type: FloatType): GraphTensor {
  return { name: 'x', type, dims: [rows, x.length / rows], data: encodeFloats(Float32Array.from(x), type) };
}

describe('the CPU collectives (AllReduce, AllGather) on ranks of threads', { skip }, () => {
  for (const type of ['float32', 'float16', 'bfloat16'] as const) {
    test(`${type}: the sum in rank order and the shards side by side, the same bits on every rank`, () => {
      const world = 3;
      const rows = 2;
      const n = 5;
      const xs = Array.from({ length: world }, (_, r) => values(rows * n, 11 + r, type));
      const results = addon!.runGraphRanks({ model: model(type, world), provider: 'cpu', dtype: DTYPES[type] }, xs.map((x) => [tensor(x, rows, type)]));
      assert.equal(results.length, world);
      // Summed in float in rank order, rounded once to the type.
      const sum = new Float32Array(rows * n);
      for (let i = 0; i < sum.length; i++) sum[i] = Math.fround(Math.fround(xs[0]![i]! + xs[1]![i]!) + xs[2]![i]!);
      const expectedSum = encodeFloats(sum, type);
      const gathered = new Float32Array(rows * n * world);
      for (let row = 0; row < rows; row++) {
        for (let r = 0; r < world; r++) gathered.set(xs[r]!.subarray(row * n, (row + 1) * n), (row * world + r) * n);
      }
      for (const [r, { outputs }] of results.entries()) {
        const byName = new Map(outputs.map((o) => [o.name, o]));
        assert.deepEqual(byName.get('sum')!.dims, [rows, n], `rank ${r}`);
        assert.deepEqual(byName.get('sum')!.data, expectedSum, `rank ${r}'s sum`);
        assert.deepEqual(byName.get('gathered')!.dims, [rows, n * world], `rank ${r}`);
        assert.deepEqual(decodeRaw(byName.get('gathered')!.data, RAW[type]), gathered, `rank ${r}'s gather`);
      }
    });
  }

  test('a graph of world_size 1 passes x through without a group', () => {
    const x = values(6, 3, 'float32');
    const { outputs } = addon!.runGraph({ model: model('float32', 1), provider: 'cpu', dtype: 'fp32' }, [tensor(x, 2, 'float32')]);
    for (const output of outputs) assert.deepEqual(decodeRaw(output.data, 'F32'), x);
  });

  test('world_size 2 outside a group is refused by name', () => {
    assert.throws(() => addon!.runGraph({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32' }, [tensor(values(4, 1, 'float32'), 1, 'float32')]), /world_size 2 needs a tensor-parallel group/);
  });

  test('a group of another size than world_size is refused', () => {
    const inputs = [0, 1, 2].map((r) => [tensor(values(4, r, 'float32'), 1, 'float32')]);
    assert.throws(() => addon!.runGraphRanks({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32' }, inputs), /world_size 2 in a tensor-parallel group of 3/);
  });

  test('ranks that disagree on the shape abort every rank with the reason', () => {
    const inputs = [[tensor(values(4, 1, 'float32'), 1, 'float32')], [tensor(values(6, 2, 'float32'), 1, 'float32')]];
    assert.throws(() => addon!.runGraphRanks({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32' }, inputs), /the ranks disagree: rank \d ran All(Reduce|Gather) of \d elements where rank \d ran All(Reduce|Gather) of \d/);
  });
});

describe('a failing or missing rank ends the group with a clear error', { skip }, () => {
  const inputs = () => [0, 1].map((r) => [tensor(values(4, r, 'float32'), 1, 'float32')]);

  test('a rank that never arrives: the others give up after the timeout, naming it', () => {
    assert.throws(
      () => addon!.runGraphRanks({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32', timeoutMs: 300, absent: 1 }, inputs()),
      /rank 0 waited 0\.3 s at All(Reduce|Gather) for rank\(s\) 1, which never arrived/,
    );
  });

  test('a rank that fails: the one waiting for it throws its error at once, not a timeout', () => {
    const bad = inputs();
    bad[1] = [{ ...bad[1]![0]!, name: 'not_an_input' }];
    assert.throws(() => addon!.runGraphRanks({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32', timeoutMs: 60000 }, bad), (error: Error) => {
      assert.match(error.message, /^tensor-parallel rank 1 failed: .*not_an_input/);
      return true;
    });
  });

  test('the same group runs again after a failure', () => {
    const results = addon!.runGraphRanks({ model: model('float32', 2), provider: 'cpu', dtype: 'fp32' }, inputs());
    assert.equal(results.length, 2);
  });
});

describe('CUDA ranks', { skip }, () => {
  test('without NCCL are refused, naming the library and how to point at it', () => {
    // Where the library is not: the loader reads the variable when CUDA ranks first need NCCL.
    process.env.CHORUS_NCCL_LIBRARY = join(root, 'libnccl.so.2');
    const inputs = [0, 1].map((r) => [tensor(values(4, r, 'float32'), 1, 'float32')]);
    const expected = addon!.cuda ? /tensor parallelism on CUDA needs NCCL, and .*libnccl\.so\.2 could not be loaded \(.*\): install .* or set CHORUS_NCCL_LIBRARY/ : /needs a build of the native engine with CUDA/;
    assert.throws(() => addon!.runGraphRanks({ model: model('float32', 2), provider: 'cuda', dtype: 'fp32' }, inputs), expected);
  });
});
