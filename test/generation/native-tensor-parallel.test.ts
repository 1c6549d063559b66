import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type NativeEngineOptions, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { loadNative, type SlotDecoderOptions } from '../../src/native/index.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { tinyCheckpoint } from '../helpers/tensor-parallel.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-tp-');

type Mix = Array<{ prompt: number[]; params: SamplingParams }>;

// Greedy rows (some with a min_length or a penalty: the sampler's rows), beam searches, and seeded
// sampling, all in one batch.
const mix: Mix = [
  { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 20 } },
  { prompt: [30, 31, 32, 33, 34], params: { beam_width: 3, request_output_len: 10 } },
  { prompt: [12, 13], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 12 } },
  { prompt: [40, 41, 42, 43], params: { temperature: 0, repetition_penalty: 1.4, request_output_len: 16 } },
  { prompt: [7, 8, 9], params: { beam_width: 2, request_output_len: 8 } },
  { prompt: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, min_length: 5, request_output_len: 9 } },
];

function run(engine: NativeEngine, r: Mix[number]): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds: r.prompt, params: r.params, stream: true }).pipe(toArray()));
}

/** Each request's tokens, beams and finish reasons. */
async function tokensOf(engine: NativeEngine): Promise<Array<Array<[number, number | undefined, string | undefined]>>> {
  const events = await Promise.all(mix.map((r) => run(engine, r)));
  return events.map((list) => list.map((e) => [e.token, e.sequence, e.finishReason]));
}

for (const arch of ['llama', 'gpt2'] as const) {
  describe(`tensor_parallel 2 on CPU ranks, tiny ${arch}`, { skip }, () => {
    const whole = join(root, `${arch}-tp1`);
    const split = join(root, `${arch}-tp2`);
    const engines: NativeEngine[] = [];
    before(() => {
      // GPT-2's odd vocabulary pads the last rank's shard of the embeddings and head.
      const source = tinyCheckpoint(arch, join(root, `${arch}-ckpt`), arch === 'gpt2' ? 251 : undefined);
      buildModel({ source, out: whole, flavor: 'cuda', slotDecoder: true });
      buildModel({ source, out: split, flavor: 'cuda', slotDecoder: true, tensorParallel: 2 });
    });
    after(async () => {
      await Promise.all(engines.map((e) => e.close()));
    });
    const open = async (dir: string, options: NativeEngineOptions): Promise<NativeEngine> => {
      const engine = await NativeEngine.open(dir, { maxBatchSize: 8, slotLength: 64, ...options });
      engines.push(engine);
      return engine;
    };

    test('greedy, beam and sampled ids equal one rank\'s, on the step loop, the continuous core and the paged cache', async () => {
      const lines: string[] = [];
      const want = await tokensOf(await open(whole, {}));
      assert.deepEqual(await tokensOf(await open(split, { tensorParallel: 2, log: (line) => lines.push(line) })), want);
      assert.ok(lines.some((line) => /^tensor_parallel 2: CPU rank 0 [\d.]+ GiB of weights and [\d.]+ GiB of cache; CPU rank 1 /.test(line)), lines.join('\n'));
      assert.deepEqual(await tokensOf(await open(split, { tensorParallel: 2, continuous: true })), want);
      assert.deepEqual(await tokensOf(await open(split, { tensorParallel: 2, pagedCache: true })), want);
    });

    test('a split build is opened as it was built, or refused by name', async () => {
      await assert.rejects(open(split, {}), /is built split over 2 ranks, and the model asks for tensor_parallel 1; build it with tensor_parallel: 1/);
      await assert.rejects(open(whole, { tensorParallel: 2 }), /is built unsplit, and the model asks for tensor_parallel 2/);
    });
  });
}

/** Options of rank 0 of the tiny Llama split in two (its build from the suites above), 2 slots of 16. */
function splitDecoder(): SlotDecoderOptions {
  const dir = join(root, 'llama-tp2');
  const spec = buildSpec<{ numLayers: number; numKvHeads: number; headDim: number; vocabSize: number }>(dir);
  const rank = (r: number) => join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx');
  return { model: rank(0), rankModels: [rank(1)], provider: 'cpu', slots: 2, maxLength: 16, layers: spec.numLayers, kvHeads: spec.numKvHeads % 2 === 0 ? spec.numKvHeads / 2 : 1, headDim: spec.headDim, vocab: spec.vocabSize, dtype: 'fp32' };
}

describe('an interrupt of a split decoder', { skip }, () => {
  test('stops every rank after the same step: the next run\'s collectives meet', async () => {
    // A rank that ran on alone would wait in a collective the others skip, and the group would time out.
    const decoder = new addon!.SlotDecoder({ ...splitDecoder(), rankTimeoutMs: 5000 });
    await decoder.load();
    const first = await decoder.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0));
    decoder.interrupt();
    assert.equal((await decoder.decodeGreedy(first.argmax, Int32Array.from([3]), Int32Array.from([10]), new Int32Array(0), 10)).steps, 1);
    await decoder.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0));
    const run = await decoder.decodeGreedy(first.argmax, Int32Array.from([3]), Int32Array.from([10]), new Int32Array(0), 10);
    assert.equal(run.steps, 10);
    await decoder.close();
  });
});

describe('a rank that fails', { skip }, () => {
  test('fails the call on every rank at once (rank 0 waits no timeout for it), with the rank named, and the decoder closes', async () => {
    // Rank 1 runs the unsplit decoder, whose cache is not a rank's: it fails its first step.
    const options: SlotDecoderOptions = { ...splitDecoder(), rankModels: [join(root, 'llama-tp1', 'onnx', 'decoder_model_slots.onnx')], rankTimeoutMs: 600000 };
    const decoder = new addon!.SlotDecoder(options);
    await decoder.load();
    for (let call = 0; call < 2; call++) await assert.rejects(decoder.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0)), /^Error: tensor-parallel rank 1 failed: /);
    await decoder.close();
  });
});
