/**
 * Models with several end ids (Llama 3.1 Instruct lists them in config.json; Phi-3 and Gemma 2 only in
 * generation_config.json): the build resolves them as transformers does, and both engines stop a
 * sequence at whichever comes first. The checkpoints are the families' golden fixtures
 * (test/fixtures/arch) with end ids chosen among their golden greedy ids, so the expected output is the
 * golden greedy run cut after its first end id.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { endIdsOf } from '../../src/util/end-ids.ts';
import { archFixture, readArchGolden } from '../helpers/arch-golden.ts';
import { END_ID_CASES, expectedRuns, writeEndIdSource } from '../helpers/end-ids.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-end-ids-');
const { addon, reason } = loadNative();
const nativeSkip = addon === undefined ? `the native addon: ${reason}` : false;

test('endIdsOf() takes generation_config.json\'s eos_token_id over config.json\'s, one id or a list, each once', () => {
  assert.deepEqual(endIdsOf({ eos_token_id: 2 }), [2]);
  assert.deepEqual(endIdsOf({ eos_token_id: [128001, 128008, 128009, 128001] }), [128001, 128008, 128009]);
  assert.deepEqual(endIdsOf({ eos_token_id: 32000 }, { eos_token_id: [32000, 32001, 32007] }), [32000, 32001, 32007]);
  assert.deepEqual(endIdsOf({ eos_token_id: 1 }, { bos_token_id: 2 }), [1]);
  assert.deepEqual(endIdsOf({ eos_token_id: 1 }, { eos_token_id: null }), []);
  assert.deepEqual(endIdsOf({}), []);
  // An id past the model's vocabulary can never be chosen: left out.
  assert.deepEqual(endIdsOf({ eos_token_id: [2, 600] }, undefined, 512), [2]);
  assert.throws(() => endIdsOf({ eos_token_id: 1 }, { eos_token_id: ['</s>'] }), /generation_config.json: eos_token_id must be a non-negative integer or a list of them, got \["<\/s>"\]/);
  assert.throws(() => endIdsOf({ eos_token_id: -1 }), /config.json: eos_token_id must be/);
});

async function run(engine: Engine, prompt: readonly number[], params: SamplingParams, stream = true): Promise<{ ids: number[]; reason: string | undefined; events: TokenEvent[] }> {
  const events = await lastValueFrom(engine.submit({ inputIds: prompt, params, stream }).pipe(toArray()));
  return { ids: events.map((e) => e.token), reason: events.at(-1)?.finishReason, events };
}

for (const c of END_ID_CASES) {
  const { family, endIds, where } = c;
  const golden = readArchGolden(family);
  describe(`${family} with end ids ${endIds.join(', ')} in ${where}`, { skip: golden === undefined ? `no fixture at ${archFixture(family)}` : false }, () => {
    const source = join(root, `${family}-source`);
    const portable = join(root, `${family}-portable`);
    const cuda = join(root, `${family}-cuda`);
    const want = golden === undefined ? [] : expectedRuns(golden, endIds);
    /** All 8 prompts at once through `engine`, greedy up to the golden length, no request end id. */
    const greedyAll = (engine: Engine, stream = true): Promise<Array<{ ids: number[]; reason: string | undefined }>> =>
      Promise.all(golden!.prompts.map((prompt, p) => run(engine, prompt, { temperature: 0, request_output_len: golden!.greedy[p]!.length }, stream)));
    const matches = async (opening: Promise<Engine>, stream = true): Promise<void> => {
      const engine = await opening;
      try {
        const got = await greedyAll(engine, stream);
        got.forEach((g, p) => assert.deepEqual({ ids: g.ids, reason: g.reason }, want[p], `prompt ${p}`));
      } finally {
        await engine.close();
      }
    };

    before(() => {
      writeEndIdSource(archFixture(family), source, c);
      buildModel({ source, out: portable, greedySearch: true });
      buildModel({ source, out: cuda, flavor: 'cuda', slotDecoder: true });
    });

    test('the golden runs stop at each of the end ids, and some at neither (the case tests what it means to)', () => {
      for (const id of endIds) assert.ok(want.some((w) => w.ids.at(-1) === id && w.ids.length > 1), `a prompt ends at ${id}`);
      assert.ok(want.some((w) => w.reason === 'length'));
    });

    test('the build writes the end ids to generation_config.json and chorus_build.json', () => {
      const generation = JSON.parse(readFileSync(join(portable, 'generation_config.json'), 'utf8')) as Record<string, unknown>;
      assert.deepEqual(generation.eos_token_id, endIds);
      const info = JSON.parse(readFileSync(join(portable, 'chorus_build.json'), 'utf8')) as { endIds: number[]; greedySearch: { eosTokenId: number } };
      assert.deepEqual(info.endIds, endIds);
      // ONNX Runtime's GreedySearch takes one end id: built without, and left aside by the engine.
      assert.equal(info.greedySearch.eosTokenId, -1);
    });

    test('the TypeScript engine stops each prompt at whichever end id comes first', () => matches(OrtEngine.open(portable, { maxBatchSize: 8 })));
    test('the TypeScript engine with the GreedySearch model built: non-streamed requests stop there too', () => matches(OrtEngine.open(portable, { maxBatchSize: 8 }), false));
    test('the native engine over slots', { skip: nativeSkip }, () => matches(NativeEngine.open(cuda, { maxBatchSize: 8 })));
    test('the native engine over a paged cache', { skip: nativeSkip }, () => matches(NativeEngine.open(cuda, { maxBatchSize: 8, pagedCache: true, blockSize: 4 })));
    test("the native engine's continuous core", { skip: nativeSkip }, () => matches(NativeEngine.open(cuda, { maxBatchSize: 8, continuous: true })));

    test("a model definition's end_ids (the engines' endIds) replace the model's", { skip: nativeSkip }, async () => {
      const only = [endIds[1]!];
      const replaced = expectedRuns(golden!, only);
      for (const opening of [OrtEngine.open(portable, { maxBatchSize: 8, endIds: only }), NativeEngine.open(cuda, { maxBatchSize: 8, endIds: only })]) {
        const engine = await opening;
        try {
          const got = await greedyAll(engine);
          got.forEach((g, p) => assert.deepEqual({ ids: g.ids, reason: g.reason }, replaced[p], `prompt ${p}`));
        } finally {
          await engine.close();
        }
      }
      await assert.rejects(OrtEngine.open(portable, { endIds: [24, 512] }), /end_ids must be a non-empty list of ids below the vocabulary's 512, got \[24,512\]/);
    });

    test('min_length bans every end id, and no beam hypothesis goes past one: the native engine gives the TypeScript engine\'s tokens', { skip: nativeSkip }, async () => {
      const engines = [await OrtEngine.open(portable, { maxBatchSize: 8 }), await NativeEngine.open(cuda, { maxBatchSize: 8 }), await NativeEngine.open(cuda, { maxBatchSize: 8, continuous: true })];
      try {
        // Past each prompt's first end id (or 40 tokens in), then on to the next one.
        const minLength = want.map((w) => Math.min(w.ids.length + 2, 40));
        const outputs = await Promise.all(engines.map((engine) => Promise.all(golden!.prompts.map((prompt, p) => run(engine, prompt, { temperature: 0, request_output_len: 64, min_length: minLength[p]! })))));
        outputs[0]!.forEach((o, p) => {
          const first = o.ids.findIndex((id) => endIds.includes(id));
          assert.ok(first === -1 || first >= minLength[p]!, `prompt ${p}: an end id at ${first}, before min_length ${minLength[p]}`);
          assert.equal(o.reason, first === -1 ? 'length' : 'end_id', `prompt ${p}`);
          if (first !== -1) assert.equal(first, o.ids.length - 1, `prompt ${p} ends at its first end id`);
        });
        for (const other of outputs.slice(1)) assert.deepEqual(other.map((o) => o.ids), outputs[0]!.map((o) => o.ids));
        // From the prompt whose greedy run meets an end id soonest (beam hypotheses ending at either
        // are in test/generation/beam-search.test.ts, where the probabilities are chosen).
        const soonest = want.reduce((best, w, p) => (w.reason === 'end_id' && w.ids.length < want[best]!.ids.length ? p : best), want.findIndex((w) => w.reason === 'end_id'));
        const beams = await Promise.all(
          engines.slice(0, 2).map((engine) => run(engine, golden!.prompts[soonest]!, { beam_width: 4, num_return_sequences: 4, request_output_len: 48, early_stopping: false })),
        );
        const sequences = (events: TokenEvent[]): number[][] => {
          const out: number[][] = [];
          for (const e of events) (out[e.sequence!] ??= []).push(e.token);
          return out;
        };
        const [ts, native] = beams.map((b) => sequences(b.events));
        assert.deepEqual(native, ts);
        for (const s of ts!) {
          assert.ok(s.length === 48 || endIds.includes(s.at(-1)!), `a hypothesis ends at an end id or the length: ${s.join(',')}`);
          assert.ok(!s.slice(0, -1).some((id) => endIds.includes(id)), `no hypothesis goes on past an end id: ${s.join(',')}`);
        }
      } finally {
        for (const engine of engines) await engine.close();
      }
    });
  });
}
