import assert from 'node:assert/strict';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { firstValueFrom, lastValueFrom, toArray } from 'rxjs';
import { OrtEngine, type RequestMetrics, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';
import { buildGolden, readGolden, unusedId } from '../helpers/golden.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-engine-');
const models: Record<'stories' | 'gpt2', string> = { stories: join(root, 'stories'), gpt2: join(root, 'gpt2') };

before(() => {
  buildModel({ source: `${STORIES}/stories260K.bin`, out: models.stories });
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 21, out: join(root, 'gpt2-ckpt') });
  buildModel({ source: join(root, 'gpt2-ckpt'), out: models.gpt2 });
});

function events(engine: OrtEngine, inputIds: number[], params: SamplingParams): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()));
}

async function ids(engine: OrtEngine, inputIds: number[], params: SamplingParams): Promise<number[]> {
  return (await events(engine, inputIds, params)).map((e) => e.token);
}

/** A fixed pseudo-random sequence of requests. */
function requests(count: number, seed: number, vocab: number): Array<{ prompt: number[]; length: number }> {
  let state = seed;
  const next = (n: number): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state >>> 8) % n;
  };
  return Array.from({ length: count }, () => ({ prompt: [1, ...Array.from({ length: 1 + next(20) }, () => 3 + next(vocab - 3))], length: 1 + next(40) }));
}

describe('OrtEngine', () => {
  let stories: OrtEngine;
  let alone: DecoderSession;
  before(async () => {
    stories = await OrtEngine.open(models.stories, { maxBatchSize: 16 });
    alone = await DecoderSession.open(models.stories);
  });
  after(async () => {
    await stories.close();
    await alone.close();
  });

  test('greedy from BOS tells llama2.c\'s documented story', async () => {
    const out = await ids(stories, [1], { temperature: 0, request_output_len: 60 });
    assert.deepEqual(out, await alone.greedy([1], 60));
    const text = Llama2cTokenizer.load(`${STORIES}/tok512.bin`).decode(out);
    assert.ok(text.startsWith('Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'), text);
  });

  for (const name of ['stories', 'gpt2'] as const) {
    test(`${name}: 64 concurrent greedy requests of random lengths produce the ids each produces alone`, async () => {
      const engine = name === 'stories' ? stories : await OrtEngine.open(models.gpt2, { maxBatchSize: 16 });
      const session = name === 'stories' ? alone : await DecoderSession.open(models.gpt2);
      const batch = requests(64, name === 'stories' ? 3 : 4, 500);
      const together = await Promise.all(batch.map((r) => ids(engine, r.prompt, { temperature: 0, request_output_len: r.length })));
      for (let i = 0; i < batch.length; i++) assert.deepEqual(together[i], await session.greedy(batch[i]!.prompt, batch[i]!.length), `request ${i}`);
      assert.equal(engine.stats().running, 0);
      if (name === 'gpt2') {
        await engine.close();
        await session.close();
      }
    });
  }

  test('seeded sampling gives the same tokens alone as interleaved with 40 others in random order', async () => {
    const seeded = requests(20, 8, 500).map((r, i) => ({ ...r, params: { temperature: 0.9, runtime_top_k: 40, runtime_top_p: 0.95, random_seed: 1000 + i, request_output_len: r.length } }));
    const aloneOutputs: number[][] = [];
    for (const r of seeded) aloneOutputs.push(await ids(stories, r.prompt, r.params));
    const others = requests(40, 9, 500).map((r, i) => ({ ...r, params: { temperature: 1, random_seed: i, request_output_len: r.length } }));
    const mixed = [...seeded.map((r, i) => ({ r, i })), ...others.map((r) => ({ r, i: -1 }))].sort((a, b) => ((a.r.prompt[1]! * 31 + a.r.length) % 17) - ((b.r.prompt[1]! * 31 + b.r.length) % 17));
    const results = await Promise.all(mixed.map(({ r }) => ids(stories, r.prompt, r.params)));
    mixed.forEach(({ i }, k) => {
      if (i >= 0) assert.deepEqual(results[k], aloneOutputs[i], `seeded request ${i}`);
    });
  });

  test('a request submitted while 32 others are mid-generation gets its first token before any of them finishes', async () => {
    const engine = await OrtEngine.open(models.stories, { maxBatchSize: 64 });
    const finishedAt: number[] = [];
    let order = 0;
    const running = Array.from({ length: 32 }, (_, i) =>
      lastValueFrom(engine.submit({ inputIds: [1, 3 + i], params: { temperature: 0, request_output_len: 40 } })).then(() => finishedAt.push(order++)),
    );
    await waitForStep(engine, 5);
    assert.ok(engine.stats().running === 32 && finishedAt.length === 0, 'the others are mid-generation');
    await firstValueFrom(engine.submit({ inputIds: [1, 403], params: { temperature: 0, request_output_len: 40 } }));
    const firstTokenAt = order++;
    await Promise.all(running);
    assert.ok(finishedAt.every((t) => t > firstTokenAt), `first token at ${firstTokenAt}, finishes at ${finishedAt.join(',')}`);
    await engine.close();
  });

  test('cancelling 50 of 100 streams mid-way leaves 50 running within one step, and the rest finish as without it', async () => {
    const engine = await OrtEngine.open(models.stories, { maxBatchSize: 100 });
    const batch = requests(100, 11, 500).map((r) => ({ ...r, length: 30 }));
    const expected = await Promise.all(batch.map((r) => ids(engine, r.prompt, { temperature: 0, request_output_len: r.length })));
    const outputs: number[][] = batch.map(() => []);
    let cancelled = false;
    let runningOneStepLater: Promise<number> | undefined;
    const done: Array<Promise<void>> = [];
    const subscriptions = batch.map((r, i) => {
      let resolveDone!: () => void;
      done.push(new Promise<void>((resolve) => (resolveDone = resolve)));
      return engine.submit({ inputIds: r.prompt, params: { temperature: 0, request_output_len: r.length } }).subscribe({
        next: (event) => {
          outputs[i]!.push(event.token);
          if (!cancelled && event.index === 9) {
            cancelled = true;
            const during = engine.stats().steps; // this step ends at during + 1; the next one drops the cancelled
            for (let k = 0; k < 100; k += 2) subscriptions[k]!.unsubscribe();
            runningOneStepLater = waitForStep(engine, during + 2).then(() => engine.stats().running);
          }
        },
        complete: () => resolveDone() });
    });
    for (let k = 0; k < 100; k += 2) done[k] = Promise.resolve();
    await Promise.all(done);
    assert.equal(await runningOneStepLater, 50);
    for (let k = 1; k < 100; k += 2) assert.deepEqual(outputs[k], expected[k], `stream ${k}`);
    for (let k = 0; k < 100; k += 2) assert.ok(outputs[k]!.length < 30, `stream ${k} stopped early`);
    await engine.close();
  });

  test('log-probabilities and their running sum come with each token when asked', async () => {
    const out = await events(stories, [1], { temperature: 0, request_output_len: 5, is_return_log_probs: true });
    let sum = 0;
    for (const event of out) {
      assert.ok(event.logProb! <= 0);
      sum += event.logProb!;
      assert.ok(Math.abs(event.cumLogProb! - sum) < 1e-9);
    }
    assert.equal(out.at(-1)!.finishReason, 'length');
  });

  test('start_id (else the model\'s BOS) is where an empty prompt starts', async () => {
    const fromBos = await ids(stories, [1], { temperature: 0, request_output_len: 8 });
    assert.deepEqual(await ids(stories, [], { temperature: 0, request_output_len: 8 }), fromBos);
    const from403 = await ids(stories, [403], { temperature: 0, request_output_len: 8 });
    assert.notDeepEqual(from403, fromBos);
    assert.deepEqual(await ids(stories, [], { temperature: 0, request_output_len: 8, start_id: 403 }), from403);
  });

  test('end_id ends a sequence early, with finish reason end_id', async () => {
    const greedyIds = await ids(stories, [1], { temperature: 0, request_output_len: 10 });
    const out = await events(stories, [1], { temperature: 0, request_output_len: 10, end_id: greedyIds[3] });
    assert.deepEqual(out.map((e) => e.token), greedyIds.slice(0, 4));
    assert.equal(out.at(-1)!.finishReason, 'end_id');
  });

  test('beam requests share the batch with sampling ones and each gets what it gets alone; cancelling one frees its rows', async () => {
    const beam = { beam_width: 4, num_return_sequences: 2, request_output_len: 24, len_penalty: 1.5 };
    const prompts = [[1], [1, 403, 407], [1, 261]];
    const aloneBeams: TokenEvent[][] = [];
    for (const p of prompts) aloneBeams.push(await events(stories, p, beam));
    const greedyAlone = await ids(stories, [1, 300], { temperature: 0, request_output_len: 30 });
    const together = await Promise.all([...prompts.map((p) => events(stories, p, beam)), events(stories, [1, 300], { temperature: 0, request_output_len: 30 })]);
    // The same tokens; scores within float32 noise (a batched kernel sums in another order).
    const tokens = (out: TokenEvent[]): Array<[number, number | undefined]> => out.map((e) => [e.token, e.sequence]);
    assert.deepEqual(together.slice(0, 3).map(tokens), aloneBeams.map(tokens));
    together.slice(0, 3).forEach((out, i) => out.forEach((e, j) => assert.ok(Math.abs((e.score ?? 0) - (aloneBeams[i]![j]!.score ?? 0)) < 1e-5)));
    assert.deepEqual(together[3]!.map((e) => e.token), greedyAlone);
    // Two different sequences each, best first.
    for (const out of aloneBeams) {
      assert.deepEqual([...new Set(out.map((e) => e.sequence))], [0, 1]);
      const [first, second] = [0, 1].map((n) => out.filter((e) => e.sequence === n));
      assert.notDeepEqual(first!.map((e) => e.token), second!.map((e) => e.token));
      assert.ok(first!.at(-1)!.score! >= second!.at(-1)!.score!);
    }
    // A cancelled beam request leaves the batch (its 4 rows with it) within a step.
    const subscription = stories.submit({ inputIds: [1], params: { ...beam, request_output_len: 200 } }).subscribe();
    const companion = ids(stories, [1, 300], { temperature: 0, request_output_len: 30 });
    while (stories.stats().decodeSteps === 0 || stories.stats().cacheTokens === 0 || stories.stats().running < 2) await new Promise((resolve) => setImmediate(resolve));
    await waitForStep(stories, stories.stats().steps + 3);
    assert.equal(stories.stats().running, 2);
    const rowsBefore = stories.stats().reservedTokens;
    subscription.unsubscribe();
    await waitForStep(stories, stories.stats().steps + 1);
    assert.equal(stories.stats().running, 1);
    assert.equal(rowsBefore - stories.stats().reservedTokens, 4 * (1 + 200));
    assert.deepEqual(await companion, greedyAlone);
  });

  test('bad requests fail with typed errors naming the field', async () => {
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1], params: { runtime_top_p: 1.5 } })), { message: 'runtime_top_p must be a number in (0, 1], got 1.5' });
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1], params: { request_output_len: 600 } })), { code: 'CHORUS_CANNOT_FIT' });
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1], params: { beam_width: 4, runtime_top_k: 40 } })), {
      message: 'runtime_top_k 40 has no effect with beam_width 4 (beam search keeps the best beams; it does not sample); leave it at 0 or 1' });
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1], params: { len_penalty: 2 } })), { message: /^len_penalty 2 ranks beams: it needs beam_width > 1/ });
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1], params: { beam_width: 17 } })), { code: 'CHORUS_CANNOT_FIT', message: /beam_width 17 needs 17 rows of a batch that holds 16/ });
    await assert.rejects(firstValueFrom(stories.submit({ inputIds: [1, 15496] })), { message: 'inputIds[1] must be a token id, an integer in [0, 511], got 15496' });
  });
});

async function waitForStep(engine: OrtEngine, step: number): Promise<void> {
  while (engine.stats().steps < step) await new Promise((resolve) => setImmediate(resolve));
}

describe('OrtEngine against transformers', () => {
  for (const name of ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny']) {
    test(`${name}: greedy generation through the engine equals transformers' greedy ids (golden fixture)`, async () => {
      const golden = readGolden(name);
      const engine = await OrtEngine.open(buildGolden(golden, root, name));
      // Both prompts at once, so they share batches. transformers' loop did not stop at eos, so the end
      // id is an id that none of the expected outputs contains.
      const endId = unusedId(golden);
      const outputs = await Promise.all(golden.prompts.map((prompt, i) => ids(engine, prompt, { temperature: 0, request_output_len: golden.greedy[i]!.length, end_id: endId })));
      await engine.close();
      assert.deepEqual(outputs, golden.greedy);
    });
  }
});

test('an empty prompt on a model with no BOS needs a start_id, and says so', async () => {
  const dir = join(root, 'gpt2-no-bos');
  cpSync(models.gpt2, dir, { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  delete config.bos_token_id;
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  const engine = await OrtEngine.open(dir);
  await assert.rejects(firstValueFrom(engine.submit({ inputIds: [] })), { message: 'inputIds must be at least one token id, or a start_id (this model has no bos_token_id to start from), got []' });
  assert.equal((await ids(engine, [], { start_id: 7, temperature: 0, request_output_len: 3 })).length, 3);
  await engine.close();
});

test('stop_words end a sequence when the output ends with one, with finish reason stop', async () => {
  const engine = await OrtEngine.open(models.stories);
  const greedyIds = (await lastValueFrom(engine.submit({ inputIds: [1], params: { temperature: 0, request_output_len: 12 } }).pipe(toArray()))).map((e) => e.token);
  const out = await lastValueFrom(engine.submit({ inputIds: [1], params: { temperature: 0, request_output_len: 12, stop_words: [[99, 98], greedyIds.slice(4, 6)] } }).pipe(toArray()));
  assert.deepEqual(out.map((e) => e.token), greedyIds.slice(0, 6));
  assert.equal(out.at(-1)!.finishReason, 'stop');
  await engine.close();
});

test('the metrics hook gets each request\'s timings, and stats count tokens, requests and batch occupancy', async () => {
  const reported: RequestMetrics[] = [];
  const engine = await OrtEngine.open(models.stories, { maxBatchSize: 8, onRequestDone: (m) => reported.push(m) });
  const lengths = [5, 9, 13, 17];
  await Promise.all(lengths.map((n, i) => lastValueFrom(engine.submit({ inputIds: [1, 10 + i], params: { temperature: 0, request_output_len: n } }))));
  const stats = engine.stats();
  assert.deepEqual(reported.map((m) => m.tokens).sort((a, b) => a - b), lengths);
  for (const m of reported) {
    assert.equal(m.finishReason, 'length');
    assert.equal(m.interTokenMs.length, m.tokens - 1);
    assert.ok(m.queueMs >= 0 && m.timeToFirstTokenMs >= m.queueMs);
  }
  assert.equal(stats.tokensGenerated, 5 + 9 + 13 + 17);
  assert.equal(stats.requestsFinished, 4);
  assert.equal(stats.prefillSteps, 1, 'the four requests were prefilled together');
  assert.ok(stats.decodedRows / stats.decodeSteps > 2, `mean occupancy ${stats.decodedRows / stats.decodeSteps}`);
  // A beam search emits its tokens when it ends: they count, and its first token's time is known.
  await lastValueFrom(engine.submit({ inputIds: [1, 30], params: { beam_width: 3, request_output_len: 6 } }));
  const beam = reported.at(-1)!;
  assert.equal(beam.tokens, 6);
  assert.ok(Number.isFinite(beam.timeToFirstTokenMs) && beam.timeToFirstTokenMs >= beam.queueMs, `beam time to first token ${beam.timeToFirstTokenMs}`);
  await engine.close();
});

test('a closed engine refuses new requests with CHORUS_CLOSED', async () => {
  const engine = await OrtEngine.open(models.stories);
  await engine.close();
  await assert.rejects(firstValueFrom(engine.submit({ inputIds: [1] })), { code: 'CHORUS_CLOSED', message: 'the engine is closed; it takes no new requests' });
});
