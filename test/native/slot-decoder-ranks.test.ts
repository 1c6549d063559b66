import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative, type NativeBeamGroup, type SlotDecoderOptions } from '../../src/native/index.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-ranks-');

/** Options of a gpt2 slot decoder of 2 slots of 32 positions (fp32, CPU) built in `dir`. */
function decoderOptions(dir: string): SlotDecoderOptions {
  const spec = buildSpec<{ numLayers: number; numKvHeads: number; headDim: number; vocabSize: number }>(dir);
  return { model: join(dir, 'onnx', 'decoder_model_slots.onnx'), provider: 'cpu', slots: 2, maxLength: 32, layers: spec.numLayers, kvHeads: spec.numKvHeads, headDim: spec.headDim, vocab: spec.vocabSize, dtype: 'fp32' };
}

// Ranks that each run the whole model (no collectives) follow rank 0 call for call: what a group adds
// to one decoder (every call on every rank, rank 0's results, its stops followed) shows on its own.
describe('a SlotDecoder with ranks', { skip }, () => {
  const dir = join(root, 'gpt2');
  before(() => {
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 5, out: join(root, 'gpt2-ckpt') });
    buildModel({ source: join(root, 'gpt2-ckpt'), out: dir, flavor: 'cuda', slotDecoder: true });
  });

  test('gives rank 0\'s results, the same as one decoder, for prefill, greedy, beams and copies', async () => {
    const options = decoderOptions(dir);
    const one = new addon!.SlotDecoder(options);
    const group = new addon!.SlotDecoder({ ...options, rankModels: [options.model, options.model] });
    await Promise.all([one.load(), group.load()]);
    assert.deepEqual(group.rankCacheBytes, [one.cacheBytes, one.cacheBytes, one.cacheBytes]);
    for (const decoder of [one, group]) await assert.rejects(decoder.prefill(2, Int32Array.from([1, 2]), new Int32Array(0)), /^Error: slot 2 is outside 0..1$/);
    const prompts = Int32Array.from([5, 6, 7, 9, 10, 11]);
    const [a, b] = await Promise.all([one.prefill(0, prompts, Int32Array.from([1]), undefined, 2), group.prefill(0, prompts, Int32Array.from([1]), undefined, 2)]);
    assert.deepEqual(b.argmax, a.argmax);
    assert.deepEqual(b.logits, a.logits);
    const steps: number[][] = [];
    const greedy = (d: typeof one, onStep?: (step: number, ids: Int32Array) => void) => d.decodeGreedy(a.argmax, Int32Array.from([3, 3]), Int32Array.from([9, 4]), new Int32Array(0), 12, undefined, undefined, onStep);
    const [x, y] = await Promise.all([greedy(one), greedy(group, (_, ids) => steps.push([...ids]))]);
    assert.deepEqual(y, x);
    // Rank 0's steps reach the event loop while the run goes on, or just after it.
    for (let turn = 0; turn < 400 && steps.length < y.steps; turn++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(steps.length, y.steps);
    await Promise.all([one.copySlots(Int32Array.from([0]), Int32Array.from([1]), Int32Array.from([3])), group.copySlots(Int32Array.from([0]), Int32Array.from([1]), Int32Array.from([3]))]);
    const beams = (d: typeof one) => {
      const g: NativeBeamGroup = { firstRow: 0, width: 2, outputLength: 8, generated: 1, minLength: 0, endIds: new Int32Array(0), earlyStopping: 0, improvable: true, temperature: 1, lenPenalty: 1, diversityRate: 0, scores: Float64Array.from([-0.5, -1e9]), finished: new Float64Array(0) };
      return d.decodeBeams(Int32Array.from([a.argmax[0]!, a.argmax[0]!]), Int32Array.from([3, 3]), [g], 8);
    };
    const [p, q] = await Promise.all([beams(one), beams(group)]);
    assert.deepEqual(q, p);
    await one.close();
    await group.close();
  });

  test('an interrupt that rank 0 takes stops every rank after the same step', async () => {
    const options = decoderOptions(dir);
    const group = new addon!.SlotDecoder({ ...options, rankModels: [options.model] });
    await group.load();
    const first = await group.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0));
    // An interrupt asked before the run stops it after its first step.
    group.interrupt();
    const run = await group.decodeGreedy(first.argmax, Int32Array.from([3]), Int32Array.from([20]), new Int32Array(0), 20);
    assert.equal(run.steps, 1);
    // Every rank stopped where rank 0 did: the next call runs them in step again.
    const again = await group.decodeGreedy(first.argmax, Int32Array.from([3]), Int32Array.from([4]), new Int32Array(0), 4);
    assert.equal(again.steps, 4);
    await group.close();
  });

  test('a rank that fails gives the caller its error, named with its rank, and the group goes on', async () => {
    const options = decoderOptions(dir);
    await assert.rejects(new addon!.SlotDecoder({ ...options, rankModels: [join(root, 'missing.onnx')] }).load(), /tensor-parallel rank 1 failed: .*missing\.onnx/);
    // Rank 1's model is the paged decoder, which a cache of slots cannot bind: rank 1 fails its first step.
    const group = new addon!.SlotDecoder({ ...options, rankModels: [join(dir, 'onnx', 'decoder_model_paged.onnx')] });
    await group.load();
    await assert.rejects(group.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0)), /^Error: tensor-parallel rank 1 failed: .*total_sequence_length/);
    await assert.rejects(group.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0)), /tensor-parallel rank 1 failed/);
    await group.close();
  });

  test('GPU ranks whose communicator cannot be made fail the load with why, and the process goes on', () => {
    // In a process of its own: NCCL's library is looked for once per process, and a crash must not take
    // the test runner with it.
    const script = `
      const { loadNative } = await import(${JSON.stringify(join(import.meta.dirname, '../../src/native/index.ts'))});
      const options = JSON.parse(process.argv[1]);
      try {
        await new (loadNative().addon.SlotDecoder)(options).load();
        console.log('loaded');
      } catch (error) {
        console.log('refused: ' + error.message);
      }`;
    const options = { ...decoderOptions(dir), provider: 'cuda', rankModels: [decoderOptions(dir).model], rankDevices: [1] };
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, JSON.stringify(options)], { encoding: 'utf8', env: { ...process.env, CHORUS_NCCL_LIBRARY: join(root, 'no-libnccl.so.2') } });
    // With CUDA in the build: NCCL's library is missing; without: the build has no CUDA.
    assert.match(out, /^refused: .*(needs NCCL, and .*no-libnccl\.so\.2 could not be loaded|nvcc was not found when it was built)/m, out);
  });
});
