import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { Seq2SeqEngine, type SamplingParams } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { argmax, Seq2SeqSession } from '../../src/runtime/index.ts';
import { buildGolden, readGolden, unusedId } from '../helpers/golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-s2s-engine-');

function built(name: string, arch: CheckpointArch, seed: number): string {
  const checkpoint = join(root, name);
  makeCheckpoint({ arch, size: 'tiny', seed, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
  return `${checkpoint}-onnx`;
}

async function ids(engine: Seq2SeqEngine, inputIds: number[], params: SamplingParams): Promise<number[]> {
  return (await lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))).map((e) => e.token);
}

for (const name of ['t5-tiny', 't5v1_1-tiny', 'ul2-tiny', 'mbart-tiny']) {
  test(`${name}: greedy generation through the engine equals transformers' greedy ids (golden fixture)`, async () => {
    const golden = readGolden(name);
    const engine = await Seq2SeqEngine.open(buildGolden(golden, root, name));
    const endId = unusedId(golden);
    const outputs = await Promise.all(golden.prompts.map((prompt, i) => ids(engine, prompt, { temperature: 0, request_output_len: golden.greedy[i]!.length, end_id: endId })));
    await engine.close();
    assert.deepEqual(outputs, golden.greedy);
  });
}

test('BART: the forced BOS and EOS of its generation config are the first and last tokens, greedy in between', async () => {
  const dir = built('bart', 'bart', 16);
  const engine = await Seq2SeqEngine.open(dir);
  const prompt = [0, 17, 99, 200, 3, 2];
  const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 6, end_id: 511, is_return_log_probs: true } }).pipe(toArray()));
  await engine.close();
  assert.equal(events[0]!.token, 0);
  assert.equal(events[0]!.logProb, 0);
  assert.equal(events[5]!.token, 2);
  assert.equal(events[5]!.logProb, 0);
  // In between, the greedy continuation of [decoder start, BOS], computed without the engine.
  const session = await Seq2SeqSession.open(dir);
  const encoded = await session.encode([prompt]);
  let out = await session.step(encoded, [[2, 0]]);
  const expected = [0];
  for (let i = 1; i < 5; i++) {
    const next = argmax(out.logits, (out.dims[1] - 1) * session.vocabSize, session.vocabSize);
    expected.push(next);
    out = await session.step(encoded, [[next]], out.cache);
  }
  await session.close();
  assert.deepEqual(events.map((e) => e.token), [...expected, 2]);
});

test('BART: min_length up to request_output_len does not mask the forced EOS (greedy and beam search, as transformers)', async () => {
  const dir = built('bart-min', 'bart', 16);
  const engine = await Seq2SeqEngine.open(dir);
  const prompt = [0, 5, 6, 7, 8, 2];
  try {
    for (const params of [{ temperature: 0 }, { beam_width: 4, temperature: 1 }] as SamplingParams[]) {
      const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { ...params, request_output_len: 12, min_length: 12 } }).pipe(toArray()));
      const best = events.filter((e) => (e.sequence ?? 0) === 0);
      assert.equal(best.length, 12, JSON.stringify(params));
      assert.equal(best[0]!.token, 0);
      assert.equal(best[11]!.token, 2);
      assert.equal(best[11]!.finishReason, 'end_id');
      assert.ok(best.slice(1, 11).every((e) => e.token !== 2));
    }
  } finally {
    await engine.close();
  }
});

test('start_id replaces the decoder start token; an empty prompt is refused', async () => {
  const dir = built('t5-start', 't5v1_1', 5);
  const engine = await Seq2SeqEngine.open(dir);
  const prompt = [5, 17, 99, 1];
  const params = { temperature: 0, request_output_len: 6, end_id: 511 };
  const plain = await ids(engine, prompt, params);
  const started = await ids(engine, prompt, { ...params, start_id: 37 });
  await assert.rejects(lastValueFrom(engine.submit({ inputIds: [], params })), { message: 'inputIds must be at least one token id, got []' });
  await engine.close();
  const session = await Seq2SeqSession.open(dir);
  const encoded = await session.encode([prompt]);
  let out = await session.step(encoded, [[37]]);
  const expected: number[] = [];
  for (let i = 0; i < 6; i++) {
    expected.push(argmax(out.logits, 0, session.vocabSize));
    out = await session.step(encoded, [[expected.at(-1)!]], out.cache);
  }
  await session.close();
  assert.deepEqual(started, expected);
  assert.notDeepEqual(started, plain);
});

test('concurrent requests interleave and each gets what it gets alone; cancelling one stops it', async () => {
  const engine = await Seq2SeqEngine.open(built('t5-concurrent', 't5v1_1', 3));
  const prompts = Array.from({ length: 8 }, (_, i) => [5 + i, 17, 99, 200 - i, 1]);
  const params = { temperature: 0, request_output_len: 12, end_id: 511 };
  const alone: number[][] = [];
  for (const p of prompts) alone.push(await ids(engine, p, params));
  assert.deepEqual(await Promise.all(prompts.map((p) => ids(engine, p, params))), alone);
  const received: number[] = [];
  const subscription = engine.submit({ inputIds: prompts[0]!, params: { ...params, request_output_len: 200 } }).subscribe((e) => {
    received.push(e.token);
    if (received.length === 3) subscription.unsubscribe();
  });
  while (engine.stats().running > 0) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(received.length, 3);
  assert.equal(engine.stats().requestsCancelled, 1);
  await engine.close();
});

test('requests submitted together run as one cohort and each gets the tokens it gets alone', async () => {
  for (const [name, arch] of [['t5-cohort', 't5'], ['bart-cohort', 'bart']] as const) {
    const dir = built(name, arch, 23);
    const engine = await Seq2SeqEngine.open(dir, { maxBatchSize: 64 });
    const requests: Array<{ prompt: number[]; params: SamplingParams }> = [
      { prompt: [5, 6, 7, 8, 9, 10, 11, 1], params: { temperature: 0, request_output_len: 9 } },
      { prompt: [40, 41, 1], params: { temperature: 0, request_output_len: 14 } },
      { prompt: [12, 13, 14, 15, 1], params: { beam_width: 3, temperature: 1, request_output_len: 7, num_return_sequences: 2 } },
      { prompt: [70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 1], params: { temperature: 0.9, random_seed: 4, request_output_len: 11 } },
    ];
    const run = (r: (typeof requests)[number]) => lastValueFrom(engine.submit({ inputIds: r.prompt, params: r.params }).pipe(toArray()));
    const alone = [];
    for (const r of requests) alone.push(await run(r));
    const stepsAlone = engine.stats().decodeSteps;
    // A fifth request in the cohort, cancelled after its first tokens, must not disturb the others.
    const cancelled = engine.submit({ inputIds: [3, 4, 1], params: { temperature: 0, request_output_len: 30 } }).subscribe((event) => {
      if (event.index === 2) cancelled.unsubscribe();
    });
    const together = await Promise.all(requests.map(run));
    assert.deepEqual(together, alone, name);
    const stepsTogether = engine.stats().decodeSteps - stepsAlone;
    assert.ok(stepsTogether <= 14, `${name}: ${stepsTogether} cohort steps for requests of at most 14 tokens`);
    assert.equal(engine.stats().requestsCancelled, 1);
    assert.equal(engine.stats().running, 0);
    await engine.close();
  }
});
