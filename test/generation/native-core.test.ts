import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { lastValueFrom, tap, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine, type NativeEngineOptions, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { joinsAlone, joinsTogether } from '../helpers/joins.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { staggeredAlone, staggeredTogether } from '../helpers/staggered.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-core-');
const dirs = { gpt2: join(root, 'gpt2'), llama: join(root, 'llama') };

function run(engine: Engine, inputIds: number[], params: SamplingParams): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds, params, stream: true }).pipe(toArray()));
}

/** Events as [token, finish reason, top_logprobs' ids]; log-probabilities are compared apart, within a tolerance. */
function shape(events: TokenEvent[]): unknown[] {
  return events.map((e) => [e.token, e.finishReason, e.logProb === undefined, e.topLogProbs?.map((t) => t.token)]);
}

/**
 * The same tokens, finish reasons and top_logprobs ids, and log-probabilities within 1e-4: rows that
 * step in another batch make the CPU's matrix products sum in another order, which moves the last bits.
 */
function assertSameEvents(got: TokenEvent[][], want: TokenEvent[][]): void {
  assert.deepEqual(got.map(shape), want.map(shape));
  got.forEach((events, r) =>
    events.forEach((e, i) => {
      const w = want[r]![i]!;
      if (e.logProb !== undefined) assert.ok(Math.abs(e.logProb - w.logProb!) < 1e-4, `request ${r} token ${i}: log-probability ${e.logProb} against ${w.logProb}`);
      e.topLogProbs?.forEach((t, k) => assert.ok(Math.abs(t.logProb - w.topLogProbs![k]!.logProb) < 1e-4, `request ${r} token ${i} top ${k}: ${t.logProb} against ${w.topLogProbs![k]!.logProb}`));
    }),
  );
}

const mix: Array<{ prompt: number[]; params: SamplingParams }> = [
  { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 24 } },
  { prompt: [12, 13], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 17 } },
  { prompt: [40, 41, 42, 43], params: { temperature: 0, repetition_penalty: 1.4, is_return_log_probs: true, request_output_len: 20 } },
  { prompt: [7, 8, 9], params: { temperature: 0.9, runtime_top_p: 0.8, random_seed: 9, presence_penalty: 0.5, request_output_len: 12 } },
  { prompt: [2], params: { temperature: 0, min_length: 5, request_output_len: 9, stop_words: [[17]] } },
  { prompt: [9, 8, 7], params: { temperature: 0.7, top_logprobs: 3, is_return_log_probs: true, random_seed: 2, request_output_len: 8 } },
  { prompt: [3, 4, 5], params: { temperature: 1.1, runtime_top_p: 0.9, runtime_top_k: 50, frequency_penalty: 0.3, repetition_penalty: 1.2, random_seed: 77, request_output_len: 30 } },
];

describe('NativeEngine, continuous core (CPU)', { skip }, () => {
  const engines: Engine[] = [];
  before(() => {
    for (const arch of ['gpt2', 'llama'] as const) {
      makeCheckpoint({ arch, size: 'tiny', seed: 5, out: join(root, `${arch}-ckpt`) });
      buildModel({ source: join(root, `${arch}-ckpt`), out: dirs[arch], flavor: 'cuda', slotDecoder: true });
    }
  });
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const open = async (dir: string, options: NativeEngineOptions): Promise<Engine> => {
    const engine = await NativeEngine.open(dir, { maxBatchSize: 8, ...options });
    engines.push(engine);
    return engine;
  };

  for (const name of ['gpt2', 'llama'] as const) {
    test(`${name}: greedy and seeded sampled requests get the step loop's and the TypeScript engine's tokens`, async () => {
      const core = await open(dirs[name], { continuous: true });
      const loop = await open(dirs[name], {});
      const reference = await OrtEngine.open(dirs[name], { maxBatchSize: 8, greedySearch: false });
      engines.push(reference);
      const got = await Promise.all(mix.map((r) => run(core, r.prompt, r.params)));
      const want = await Promise.all(mix.map((r) => run(loop, r.prompt, r.params)));
      assertSameEvents(got, want);
      const typescript = await Promise.all(mix.map((r) => run(reference, r.prompt, r.params)));
      assert.deepEqual(got.map((events) => events.map((e) => e.token)), typescript.map((events) => events.map((e) => e.token)));
      // The stop word ended its request where the step loop ends it, the token the core took after it dropped.
      assert.equal(got[4]!.at(-1)!.finishReason, want[4]!.at(-1)!.finishReason);
      assert.equal(core.stats().requestsFinished, mix.length);
      assert.equal(core.stats().running + core.stats().waiting, 0);
    });
  }

  test('warmCore runs the admissions\' prefill shapes within its budget, and leaves the decoder\'s answers as they were', async () => {
    const spec = JSON.parse(readFileSync(join(dirs.gpt2, 'chorus_build.json'), 'utf8')).spec as { numLayers: number; numKvHeads: number; headDim: number; vocabSize: number };
    const options = { model: join(dirs.gpt2, 'onnx', 'decoder_model_slots.onnx'), provider: 'cpu' as const, slots: 4, maxLength: 100, layers: spec.numLayers, kvHeads: spec.numKvHeads, headDim: spec.headDim, vocab: spec.vocabSize, dtype: 'fp32' as const };
    const prompts = [Int32Array.from([5, 6, 7, 8, 9]), Int32Array.from([12, 13, 14])];
    const answer = async (decoder: InstanceType<NonNullable<typeof addon>['SlotDecoder']>): Promise<number[]> => [...(await decoder.prefillRagged(0, prompts, new Int32Array(0))).argmax];
    const fresh = new addon!.SlotDecoder(options);
    const warmed = new addon!.SlotDecoder(options);
    try {
      await Promise.all([fresh.load(), warmed.load()]);
      assert.equal(await warmed.warmCore(0), 0);
      // Widths 32, 64 and 96 (under the slot's 100) by rows 1, 2 and 4.
      assert.equal(await warmed.warmCore(60_000), 9);
      assert.deepEqual(await answer(warmed), await answer(fresh));
      await assert.rejects(async () => warmed.warmCore(-1), /budget in milliseconds/);
    } finally {
      await Promise.all([fresh.close(), warmed.close()]);
    }
  });

  test('sampled rows without penalties (min_length, top_logprobs and greedy rows beside them) step back to back with the step loop\'s tokens', async () => {
    const core = await open(dirs.llama, { continuous: true, maxBatchSize: 4 });
    const loop = await open(dirs.llama, { maxBatchSize: 4 });
    const requests: Array<{ prompt: number[]; params: SamplingParams }> = [
      { prompt: [5, 6, 7], params: { temperature: 0.8, runtime_top_p: 0.9, random_seed: 21, min_length: 12, request_output_len: 30 } },
      { prompt: [9, 10], params: { temperature: 0, request_output_len: 25 } },
      { prompt: [11, 12, 13, 14], params: { temperature: 1.2, runtime_top_k: 30, random_seed: 22, top_logprobs: 2, is_return_log_probs: true, request_output_len: 18 } },
      { prompt: [15], params: { temperature: 0.6, random_seed: 23, min_length: 20, request_output_len: 20 } },
      { prompt: [16, 17], params: { temperature: 0.9, runtime_top_p: 0.5, random_seed: 24, request_output_len: 40 } },
      { prompt: [18, 19, 20], params: { temperature: 0, min_length: 6, request_output_len: 10 } },
    ];
    // Arriving while the others run, six in four slots.
    const got = await Promise.all(requests.map((r, i) => new Promise<void>((resolve) => setTimeout(resolve, i * 4)).then(() => run(core, r.prompt, r.params))));
    const want: TokenEvent[][] = [];
    for (const r of requests) want.push(await run(loop, r.prompt, r.params));
    assertSameEvents(got, want);
    assert.ok(got[3]!.length === 20 && got[0]!.length >= 12);
  });

  test('on the GPU with CUDA graphs: greedy runs and sampled runs (top_logprobs, min_length) read back the step loop\'s tokens', { skip: addon?.cudaDevices() ? false : 'needs a CUDA GPU' }, async () => {
    // The core's runs on the device write each step's choices into pinned memory from its kernels and
    // copy the sampler's batches on a stream of their own; the step loop without graphs copies them.
    const options: NativeEngineOptions = { provider: 'cuda', maxBatchSize: 4, cudaOptions: { use_tf32: 0 } };
    const core = await open(dirs.llama, { ...options, continuous: true, cudaGraph: true });
    const loop = await open(dirs.llama, { ...options, cudaGraph: false });
    const greedy = [[5, 6, 7], [9, 10], [11, 12, 13, 14], [15]].map((prompt, i) => ({ prompt, params: { temperature: 0, request_output_len: 20 + 7 * i } as SamplingParams }));
    const sampled: Array<{ prompt: number[]; params: SamplingParams }> = [
      { prompt: [5, 6, 7], params: { temperature: 0.8, runtime_top_p: 0.9, random_seed: 21, min_length: 12, request_output_len: 30 } },
      { prompt: [9, 10], params: { temperature: 0, request_output_len: 25 } },
      { prompt: [11, 12, 13, 14], params: { temperature: 1.2, runtime_top_k: 30, random_seed: 22, top_logprobs: 3, is_return_log_probs: true, request_output_len: 18 } },
      { prompt: [16, 17], params: { temperature: 0.9, runtime_top_p: 0.5, random_seed: 24, request_output_len: 40 } },
    ];
    for (const requests of [greedy, sampled]) {
      const got = await Promise.all(requests.map((r) => run(core, r.prompt, r.params)));
      const want = await Promise.all(requests.map((r) => run(loop, r.prompt, r.params)));
      assertSameEvents(got, want);
    }
  });

  test('on the GPU with CUDA graphs: requests that join runs under way (prefilled behind the queued step) get the step loop\'s tokens', { skip: addon?.cudaDevices() ? false : 'needs a CUDA GPU' }, async () => {
    const options: NativeEngineOptions = { provider: 'cuda', maxBatchSize: 4, cudaOptions: { use_tf32: 0 } };
    const core = await open(dirs.llama, { ...options, continuous: true, cudaGraph: true });
    const loop = await open(dirs.llama, { ...options, cudaGraph: false });
    const want = await joinsAlone(loop);
    assert.deepEqual(await joinsTogether(core), want);
    // And again, the graphs and the staging of every batch size in place.
    assert.deepEqual(await joinsTogether(core), want);
    // The last rows' ends reach the scheduler a moment after their streams complete.
    for (let i = 0; i < 100 && core.stats().running + core.stats().waiting > 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(core.stats().running + core.stats().waiting, 0);
  });

  test('on the GPU with CUDA graphs: behind many running rows, joining requests prefill a few at a time in the staging slots, with the step loop\'s tokens', { skip: addon?.cudaDevices() ? false : 'needs a CUDA GPU' }, async () => {
    // 32 slots: two staging slots. 18 rows run; six requests join at once (three prefills of two),
    // then one alone (it waits a few steps for a second, then joins by itself).
    const options: NativeEngineOptions = { provider: 'cuda', maxBatchSize: 32, cudaOptions: { use_tf32: 0 } };
    const core = await open(dirs.llama, { ...options, continuous: true, cudaGraph: true });
    const loop = await open(dirs.llama, { ...options, cudaGraph: false });
    const requests = Array.from({ length: 25 }, (_, i) => ({
      prompt: Array.from({ length: 1 + ((i * 7) % 45) }, (_, k) => 3 + ((i + k) % 200)),
      params: { temperature: 0.8, runtime_top_p: 0.9, random_seed: 500 + i, request_output_len: i < 18 ? 60 : 12 + i } as SamplingParams,
    }));
    const want = await Promise.all(requests.map((r) => run(loop, r.prompt, r.params)));
    const got: TokenEvent[][] = new Array(requests.length);
    const later: Array<Promise<void>> = [];
    const counts = new Array<number>(18).fill(0);
    const first = requests.slice(0, 18).map((r, i) =>
      lastValueFrom(
        core.submit({ inputIds: r.prompt, params: r.params, stream: true }).pipe(
          tap({
            next: () => {
              counts[i]!++;
              if (i === 0 && counts[0] === 3) for (let j = 18; j < 24; j++) later.push(run(core, requests[j]!.prompt, requests[j]!.params).then((events) => void (got[j] = events)));
              if (i === 0 && counts[0] === 10) later.push(run(core, requests[24]!.prompt, requests[24]!.params).then((events) => void (got[24] = events)));
            },
          }),
          toArray(),
        ),
      ).then((events) => void (got[i] = events)),
    );
    await Promise.all(first);
    await Promise.all(later);
    assertSameEvents(got, want);
  });

  test('requests admitted while it runs, six in four slots, get the tokens they get alone', async () => {
    const engine = await open(dirs.llama, { continuous: true, maxBatchSize: 4 });
    const alone = await staggeredAlone(engine);
    assert.deepEqual(await staggeredTogether(engine), alone);
  });

  test('requests without penalties join the run of steps under way, into ended rows\' slots too, with the tokens they get alone', () => {
    // In a process of its own: the core's trace (read once a process) says where each request joined.
    const script = join(root, 'joins.mts');
    const trace = join(root, 'joins.trace');
    const engineModule = fileURLToPath(new URL('../../src/generation/index.ts', import.meta.url));
    const helper = fileURLToPath(new URL('../helpers/joins.ts', import.meta.url));
    writeFileSync(
      script,
      `import { NativeEngine } from ${JSON.stringify(engineModule)};
import { joinsAfterCancel, joinsAlone, joinsTogether } from ${JSON.stringify(helper)};
const engine = await NativeEngine.open(${JSON.stringify(dirs.llama)}, { maxBatchSize: 4, continuous: true });
const alone = await joinsAlone(engine);
const before = engine.stats().prefillSteps;
const together = await joinsTogether(engine);
const admissions = engine.stats().prefillSteps - before;
const afterCancel = await joinsAfterCancel(engine);
console.log(JSON.stringify({ alone, together, afterCancel, admissions, running: engine.stats().running + engine.stats().waiting }));
await engine.close();
`,
    );
    const tsx = fileURLToPath(new URL('../../node_modules/.bin/tsx', import.meta.url));
    const child = spawnSync(tsx, [script], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, CHORUS_CORE_TRACE: trace } });
    assert.equal(child.status, 0, child.stderr);
    const got = JSON.parse(child.stdout.trim().split('\n').at(-1)!) as {
      alone: number[][];
      together: number[][];
      afterCancel: { finished: number[][]; cancelled: number[] };
      admissions: number;
      running: number;
    };
    assert.deepEqual(got.together, got.alone);
    // A request that waited for a full run took the cancelled row's slot: every request's own tokens.
    assert.deepEqual(got.afterCancel.finished, [got.alone[0], got.alone[1], got.alone[2], got.alone[4]]);
    assert.deepEqual(got.afterCancel.cancelled, got.alone[3]!.slice(0, 5));
    assert.equal(got.running, 0);
    const joins = readFileSync(trace, 'utf8').split('\n').filter((line) => line.includes(' joined rows '));
    assert.ok(joins.length > 0, 'no request joined a run under way');
    assert.ok(joins.some((line) => !/ended rows' slots 0\)/.test(line)), `no request took an ended row's slot: ${readFileSync(trace, 'utf8')}`);
    // The cancelled row's slot: the last join, with four rows running.
    assert.match(joins.at(-1)!, /joined rows 1 \(ended rows' slots 1\) .* running 4 /);
    // Every request was admitted, by a prefill or by joining a run (each counted once a step).
    assert.ok(got.admissions >= 2 && got.admissions <= 7, `admissions ${got.admissions}`);
  });

  test('a stream cancelled mid-way frees its slot for a waiting request, and the others go on unchanged', async () => {
    const engine = await open(dirs.gpt2, { continuous: true, maxBatchSize: 2 });
    const alone = (await run(engine, [6, 7], { temperature: 0, request_output_len: 40 })).map((e) => e.token);
    const seen: TokenEvent[] = [];
    const subscription = engine.submit({ inputIds: [3, 4, 5], params: { temperature: 0.8, random_seed: 3, request_output_len: 60 } }).subscribe((e) => {
      seen.push(e);
      if (seen.length === 5) subscription.unsubscribe();
    });
    const other = run(engine, [6, 7], { temperature: 0, request_output_len: 40 });
    // A third request waits for a slot: the cancelled one's.
    const third = run(engine, [6, 7], { temperature: 0, request_output_len: 40 });
    assert.deepEqual((await other).map((e) => e.token), alone);
    assert.deepEqual((await third).map((e) => e.token), alone);
    assert.equal(seen.length, 5);
    assert.equal(engine.stats().requestsCancelled, 1);
    assert.equal(engine.stats().running + engine.stats().waiting, 0);
  });

  test('200 streams that disconnect after a few tokens leave nothing running or waiting, and the engine serves on', async () => {
    const engine = await open(dirs.gpt2, { continuous: true, maxBatchSize: 8 });
    const gone = await Promise.all(
      Array.from(
        { length: 200 },
        (_, i) =>
          new Promise<number>((resolve) => {
            let tokens = 0;
            const subscription = engine.submit({ inputIds: [3 + (i % 50), 4], params: { temperature: 0.7, random_seed: i, request_output_len: 100, min_length: 100 } }).subscribe((e) => {
              tokens++;
              if (tokens === 1 + (i % 4) || e.finishReason !== undefined) {
                subscription.unsubscribe();
                resolve(tokens);
              }
            });
          }),
      ),
    );
    assert.deepEqual(gone, Array.from({ length: 200 }, (_, i) => 1 + (i % 4)));
    assert.deepEqual([engine.stats().running, engine.stats().waiting, engine.stats().requestsCancelled], [0, 0, 200]);
    const alone = await run(engine, [6, 7], { temperature: 0, request_output_len: 20 });
    assert.equal(alone.length, 20);
  });

  test('a beam search waits for the core to drain and runs on the step loop, with the beams it gets there', async () => {
    const core = await open(dirs.gpt2, { continuous: true });
    const loop = await open(dirs.gpt2, {});
    const beam = { prompt: [30, 31, 32, 33, 34], params: { beam_width: 3, request_output_len: 10 } };
    const requests = [mix[0]!, beam, mix[1]!];
    const got = await Promise.all(requests.map((r) => run(core, r.prompt, r.params)));
    const want = await Promise.all(requests.map((r) => run(loop, r.prompt, r.params)));
    assert.deepEqual(got.map((events) => events.map((e) => [e.token, e.sequence])), want.map((events) => events.map((e) => [e.token, e.sequence])));
  });

  test('the process exits after close with streams cancelled mid-way: no thread or handle is left', () => {
    const script = join(root, 'exits.mts');
    const engineModule = fileURLToPath(new URL('../../src/generation/index.ts', import.meta.url));
    writeFileSync(
      script,
      `import { NativeEngine } from ${JSON.stringify(engineModule)};
const engine = await NativeEngine.open(${JSON.stringify(dirs.gpt2)}, { maxBatchSize: 4, continuous: true });
const counts = [0, 0, 0, 0, 0, 0];
let closing;
// Two streams go away mid-way; the engine closes while the others still run (and two still wait).
const subscriptions = counts.map((_, i) => engine.submit({ inputIds: [3 + i, 4], params: { temperature: 0.7, random_seed: i, request_output_len: 120 } }).subscribe({
  next: () => {
    counts[i]++;
    if ((i === 0 && counts[i] === 3) || (i === 2 && counts[i] === 5)) subscriptions[i].unsubscribe();
    if (i === 1 && counts[i] === 20) closing = engine.close();
  },
  error: () => undefined,
}));
await new Promise((resolve) => setTimeout(resolve, 50));
while (closing === undefined) await new Promise((resolve) => setTimeout(resolve, 10));
await closing;
console.log(JSON.stringify({ cancelled: [counts[0], counts[2]], closedMidway: counts[1] < 120, running: engine.stats().running }));
`,
    );
    const tsx = fileURLToPath(new URL('../../node_modules/.bin/tsx', import.meta.url));
    // A thread or handle left behind keeps the process alive: the limit is far beyond what it needs.
    const child = spawnSync(tsx, [script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(child.signal, null, `the process did not exit: ${child.stderr}`);
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout.trim().split('\n').at(-1)!), { cancelled: [3, 5], closedMidway: true, running: 0 });
  });
});
