/**
 * Served against in-process on the GPU, in one run, for one model built fp16 with the slot decoder:
 *  - in process, the engine itself (NativeEngine with CUDA graphs), 64 requests of 100 seeded prompt
 *    ids and 128 new tokens: submitted together greedy and sampled (temperature 0.7, top_p 0.9, a seed
 *    each), and 64 sampled streams arriving 2 ms apart; each on the continuous core and on the step loop;
 *  - in process through the engine client (pipeline, tokenizer, detokenizer, stop strings: what the
 *    server sits on), 64 and 1 concurrent sampled streams of news prompts (about 100 tokens, 128 new
 *    tokens exactly);
 *  - served: `chorus serve` in its own process and `chorus bench` over HTTP with the same prompts,
 *    lengths, sampling and seeds: 64 streamed (OpenAI SSE), 64 whole, 1 streamed; with the continuous
 *    core and, unless SERVE_BASELINE=0, without it.
 * The verdict is served (64 streams, core) over in process (engine client, 64 streams).
 * Usage: node --import tsx bench/gpu/serve-continuous.ts <name> <checkpoint-or-built-dir> <tokenizer-yaml> <prompts.jsonl> <out-dir>
 * Knobs: SERVE_REQUESTS=128 (per setting)  SERVE_BASELINE=1  SERVE_ENGINE=1 (0: no engine rows; core: the core's only)
 *   SERVE_HTTP_THREADS=1 (`chorus serve --http-threads`; a list such as 1,4,1,4 serves each in turn)
 *   SERVE_LIMIT_S=330 (writes what it has and exits 124 past it)
 *   SERVE_PARTS=engine,client,served (which of the three sides run)
 *   SERVE_DEVICE=cuda (cpu: a dry run of the script itself, fp32)
 * Writes <out-dir>/serve-continuous-<name>.json; prints a table.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { lastValueFrom, toArray } from 'rxjs';
import type { BenchResult } from '../../src/bench/index.ts';
import { NativeEngine, type SamplingParams } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { RepositoryClient } from '../../src/serving/index.ts';
import { clientRate, serve } from '../cpu/common.ts';
import { seededRows } from './speed/common.ts';

const args = process.argv.slice(2);
if (args.length !== 5) throw new Error('usage: serve-continuous.ts <name> <checkpoint-or-built-dir> <tokenizer-yaml> <prompts.jsonl> <out-dir>');
const [name, source, tokenizerYaml, dataset, out] = args as [string, string, string, string, string];
const ROOT = join(import.meta.dirname, '../..');
const STREAMS = 64;
const NEW = 128;
const PROMPT_IDS = 100;
const PROMPT_WORDS = 75;
const SAMPLED = { temperature: 0.7, runtime_top_p: 0.9 };
const REQUESTS = Number(process.env.SERVE_REQUESTS ?? 128);
const BASELINE = process.env.SERVE_BASELINE !== '0';
const PARTS = (process.env.SERVE_PARTS ?? 'engine,client,served').split(',');
const DEVICE = process.env.SERVE_DEVICE === 'cpu' ? 'cpu' : 'cuda';
const DTYPE = DEVICE === 'cuda' ? 'fp16' : 'fp32';
const exec = promisify(execFile);
const work = join(out, `work-${name}`);
mkdirSync(work, { recursive: true });

const results: Record<string, unknown> = { name, source, streams: STREAMS, newTokens: NEW, requestsPerSetting: REQUESTS, createdAt: new Date().toISOString(), rows: [] as unknown[] };
const rows = results.rows as Array<Record<string, unknown>>;
const save = (): void => writeFileSync(join(out, `serve-continuous-${name}.json`), `${JSON.stringify(results, null, 2)}\n`);
const row = (r: Record<string, unknown>): void => {
  rows.push(r);
  save();
  console.log(JSON.stringify(r));
};
// The lead's host gives each command a few minutes: past the limit, what was measured is kept.
setTimeout(() => {
  results.timedOut = true;
  save();
  console.error(`serve-continuous ${name}: past SERVE_LIMIT_S, stopping with what it has`);
  process.exit(124);
}, Number(process.env.SERVE_LIMIT_S ?? 330) * 1000).unref();

// The build: a checkpoint is built once (fp16, cuda flavor, slot decoder); a built directory is used as it is.
const built = existsSync(join(source, 'chorus_build.json')) ? source : join(work, 'built');
if (built !== source && !existsSync(join(built, 'chorus_build.json'))) {
  const started = performance.now();
  buildModel({ source, out: built, dtype: DTYPE, flavor: 'cuda', slotDecoder: true });
  results.buildSeconds = (performance.now() - started) / 1000;
}
const vocab = (JSON.parse(readFileSync(join(built, 'chorus_build.json'), 'utf8')) as { spec: { vocabSize: number } }).spec.vocabSize;

/** Output tokens/s of `prompts` through the engine, each request `staggerMs` after the one before. */
async function engineRate(engine: NativeEngine, prompts: number[][], params: (i: number) => SamplingParams, staggerMs = 0): Promise<number> {
  const started = performance.now();
  const counts = await Promise.all(
    prompts.map(async (inputIds, i) => {
      if (staggerMs > 0) await new Promise((resolve) => setTimeout(resolve, i * staggerMs));
      return (await lastValueFrom(engine.submit({ inputIds, params: params(i), stream: true }).pipe(toArray()))).length;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
}

/**
 * Output tokens/s of `streams` clients that each send `rounds` requests one after another (the n-th
 * client's first `staggerMs` after the one before): request i is `prompts[i % length]` with `params(i)`.
 */
async function streamsRate(engine: NativeEngine, prompts: number[][], params: (i: number) => SamplingParams, streams: number, rounds: number, staggerMs: number): Promise<number> {
  const started = performance.now();
  const counts = await Promise.all(
    Array.from({ length: streams }, async (_, s) => {
      await new Promise((resolve) => setTimeout(resolve, s * staggerMs));
      let tokens = 0;
      for (let r = 0; r < rounds; r++) {
        const i = r * streams + s;
        tokens += (await lastValueFrom(engine.submit({ inputIds: prompts[i % prompts.length]!, params: params(i), stream: true }).pipe(toArray()))).length;
      }
      return tokens;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
}

// 1. The engine in process, on the core and on the step loop.
const prompts = seededRows(STREAMS, PROMPT_IDS, vocab);
const greedy = (): SamplingParams => ({ temperature: 0, request_output_len: NEW });
const sampled = (i: number): SamplingParams => ({ ...SAMPLED, random_seed: 1000 + i, request_output_len: NEW });
for (const continuous of process.env.SERVE_ENGINE === '0' || !PARTS.includes('engine') ? [] : process.env.SERVE_ENGINE === 'core' ? [true] : [true, false]) {
  const engine = await NativeEngine.open(built, { provider: DEVICE, maxBatchSize: STREAMS, slotLength: 512, cudaGraph: true, continuous });
  try {
    const mode = continuous ? 'continuous core' : 'step loop';
    // Warm-up: every batch size's graph captured.
    await engineRate(engine, prompts, sampled, 1);
    await engineRate(engine, prompts, greedy);
    const median = async (measure: () => Promise<number>): Promise<number> => {
      const values = [await measure(), await measure(), await measure()].sort((a, b) => a - b);
      return values[1]!;
    };
    row({ side: 'in process: engine', mode, load: 'batch 64 together, greedy', tokensPerS: await median(() => engineRate(engine, prompts, greedy)) });
    row({ side: 'in process: engine', mode, load: 'batch 64 together, sampled', tokensPerS: await median(() => engineRate(engine, prompts, sampled)) });
    row({ side: 'in process: engine', mode, load: '64 streams 2 ms apart, sampled', tokensPerS: await median(() => engineRate(engine, prompts, sampled, 2)) });
    // The same over a longer run: 64 streams that start 2 ms apart and each send 4 requests one after
    // another, against the same 256 requests submitted together (64 at a time in the batch).
    const rounds = 4;
    const all = Array.from({ length: STREAMS * rounds }, (_, i) => prompts[i % prompts.length]!);
    row({ side: 'in process: engine', mode, load: `${STREAMS * rounds} together, sampled`, tokensPerS: await median(() => engineRate(engine, all, sampled)) });
    row({ side: 'in process: engine', mode, load: `64 streams 2 ms apart, ${rounds} requests each, sampled`, tokensPerS: await median(() => streamsRate(engine, prompts, sampled, STREAMS, rounds, 2)) });
    row({ side: 'in process: engine', mode, load: `${STREAMS * rounds} together, greedy`, tokensPerS: await median(() => engineRate(engine, all, greedy)) });
    row({ side: 'in process: engine', mode, load: `64 streams 2 ms apart, ${rounds} requests each, greedy`, tokensPerS: await median(() => streamsRate(engine, prompts, greedy, STREAMS, rounds, 2)) });
  } finally {
    await engine.close();
  }
}

// 2. A repository serving the build as the pipeline `name` (with the core, or without it).
const texts = readFileSync(dataset, 'utf8')
  .trim()
  .split('\n')
  .map((line) => {
    const record = JSON.parse(line) as Record<string, string>;
    return (record.article ?? record.text ?? record.prompt ?? '').split(/\s+/).slice(0, PROMPT_WORDS).join(' ');
  })
  .filter((text) => text.length > 0);
const promptsFile = join(work, 'prompts.txt');
writeFileSync(promptsFile, `${texts.join('\n')}\n`);
function repository(core: boolean): string {
  const dir = join(work, core ? 'repository-core' : 'repository-loop');
  for (const kind of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, kind), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/tok.yaml'), readFileSync(tokenizerYaml, 'utf8'));
  writeFileSync(
    join(dir, `models/${name}.yaml`),
    `engine: generate\nsource: ${built}\ntokenizer: tok\ndevice: ${DEVICE}\ndtype: ${DTYPE}\nnative_engine: true\ncontinuous_core: ${core}\nmax_batch_size: ${STREAMS}\nmax_queue: 1024\nmax_sequence_length: 512\n`,
  );
  writeFileSync(join(dir, `pipelines/${name}.yaml`), `model: ${name}\n`);
  return dir;
}

/** What the engine did over a setting: prefill steps, mean rows a decode step, engine-side TTFT and queue time. */
interface EngineSide {
  prefillSteps: number;
  occupancy: number;
  engineTtftMs?: number;
  queueMs?: number;
}
type Counters = { prefill: number; decode: number; rows: number; ttftSum?: number; ttftCount?: number; queueUs?: number };
function engineSide(before: Counters, after: Counters): EngineSide {
  const requests = (after.ttftCount ?? 0) - (before.ttftCount ?? 0);
  return {
    prefillSteps: after.prefill - before.prefill,
    occupancy: (after.rows - before.rows) / Math.max(1, after.decode - before.decode),
    ...(requests > 0 ? { engineTtftMs: (1000 * (after.ttftSum! - before.ttftSum!)) / requests, queueMs: (after.queueUs! - before.queueUs!) / 1000 / requests } : {}),
  };
}
function clientCounters(client: RepositoryClient): Counters {
  // Not loaded yet: nothing done.
  const s = client.stats().find((m) => m.name === name);
  return { prefill: s?.prefillSteps ?? 0, decode: s?.decodeSteps ?? 0, rows: s?.decodedRows ?? 0 };
}
/** The server's engine counters and request timings for the model, from its /metrics. */
async function servedCounters(url: string): Promise<Counters> {
  const text = await (await fetch(`${url}/metrics`)).text();
  // Before the model's first request: not loaded, nothing done.
  const value = (metric: string): number => Number(new RegExp(`^${metric}\\{[^}]*model="${name}"[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return {
    prefill: value('chorus_engine_prefill_steps'),
    decode: value('chorus_engine_decode_steps'),
    rows: value('chorus_engine_decoded_rows'),
    ttftSum: value('chorus_time_to_first_token_seconds_sum'),
    ttftCount: value('chorus_time_to_first_token_seconds_count'),
    queueUs: value('nv_inference_queue_duration_us'),
  };
}

/**
 * Output tokens/s and TTFT p50 of `requests` sampled requests from `streams` clients back to back through
 * the engine client, and what the engine did meanwhile.
 */
async function clientRateOf(client: RepositoryClient, streams: number, requests: number, seedBase: number): Promise<{ tokensPerS: number; ttftP50Ms: number } & EngineSide> {
  const before = clientCounters(client);
  const { tokensPerS, ttftMs } = await clientRate(client, name, streams, requests, (n) => ({
    text_input: texts[n % texts.length]!,
    max_tokens: NEW,
    min_tokens: NEW,
    temperature: SAMPLED.temperature,
    top_p: SAMPLED.runtime_top_p,
    seed: seedBase + n,
    stream: true,
  }));
  return { tokensPerS, ttftP50Ms: ttftMs[Math.floor(ttftMs.length / 2)] ?? Number.NaN, ...engineSide(before, clientCounters(client)) };
}

const coreRepository = repository(true);
// The engine's load lines (its cache, its warm-up) go to the output; the rest is quiet.
const client = RepositoryClient.open(coreRepository, { log: (line) => /warm-up|cache:/.test(line) && console.log(line) });
try {
  if (PARTS.includes('client')) {
    await clientRateOf(client, STREAMS, STREAMS, 50_000);
    row({ side: 'in process: engine client', mode: 'continuous core', load: '64 streams', ...(await clientRateOf(client, STREAMS, REQUESTS, 0)) });
    row({ side: 'in process: engine client', mode: 'continuous core', load: '1 stream', ...(await clientRateOf(client, 1, 8, 0)) });
  }
} finally {
  await client.close();
}

// 3. Served: chorus bench over HTTP against chorus serve.
async function bench(url: string, concurrency: number, requests: number, stream: boolean, label: string): Promise<BenchResult['settings'][number]['summary']> {
  const file = join(work, `bench-${label}.json`);
  const args = ['bench', '--url', url, '--pipeline', name, '--protocol', 'openai', ...(stream ? ['--stream'] : []), '--concurrency', String(concurrency), '--requests', String(requests), '--warmup', String(concurrency), '--dataset', promptsFile, '--output-tokens', String(NEW), '--temperature', String(SAMPLED.temperature), '--top-p', String(SAMPLED.runtime_top_p), '--request-seed', '0', '--quiet', '--out', file];
  await exec(process.execPath, [join(ROOT, 'bin/chorus.js'), ...args], { env: { ...process.env, CHORUS_API_KEY: '' }, timeout: 120_000 });
  const summary = (JSON.parse(readFileSync(file, 'utf8')) as BenchResult).settings[0]!.summary;
  results.servedCommand ??= `chorus ${args.slice(0, -2).join(' ')}`;
  return summary;
}
// Each entry of SERVE_HTTP_THREADS a server of its own (`--http-threads`), in that order; the step loop's with the first.
const HTTP_THREADS = (process.env.SERVE_HTTP_THREADS ?? '1').split(',').map(Number);
const servedSettings = PARTS.includes('served') ? [...HTTP_THREADS.map((n) => [true, n] as const), ...(BASELINE ? [[false, HTTP_THREADS[0]!] as const] : [])] : [];
for (const [core, httpThreads] of servedSettings) {
  const server = await serve(core ? coreRepository : repository(false), ['--http-threads', String(httpThreads)]);
  try {
    const mode = core ? 'continuous core' : 'step loop';
    for (const [concurrency, stream, load] of [[STREAMS, true, '64 streams'], [STREAMS, false, '64 whole'], [1, true, '1 stream']] as const) {
      const before = await servedCounters(server.url);
      const s = await bench(server.url, concurrency, concurrency === 1 ? 8 : REQUESTS, stream, `${core ? 'core' : 'loop'}-${httpThreads}-${concurrency}-${stream}`);
      // The engine's side covers the bench's warm-up requests too.
      row({ side: 'served: chorus bench (OpenAI)', mode, httpThreads, load, tokensPerS: s.outputTokensPerS, ok: s.ok, requests: s.requests, ttftP50Ms: s.ttftMs?.p50, itlP50Ms: s.itlMs?.p50, ...engineSide(before, await servedCounters(server.url)) });
    }
  } finally {
    server.child.kill('SIGTERM');
  }
}

const find = (side: string, mode: string, load: string): number | undefined => rows.find((r) => r.side === side && r.mode === mode && r.load === load)?.tokensPerS as number | undefined;
const inProcess = find('in process: engine client', 'continuous core', '64 streams');
const servedRate = find('served: chorus bench (OpenAI)', 'continuous core', '64 streams');
const engineGreedy = find('in process: engine', 'continuous core', 'batch 64 together, greedy');
const engineSampled = find('in process: engine', 'continuous core', 'batch 64 together, sampled');
results.servedOverInProcess = servedRate !== undefined && inProcess !== undefined ? servedRate / inProcess : undefined;
results.sampledOverGreedy = engineSampled !== undefined && engineGreedy !== undefined ? engineSampled / engineGreedy : undefined;
save();
console.log(`\n${name}: ${STREAMS} streams, ${NEW} new tokens, sampled = temperature ${SAMPLED.temperature}, top_p ${SAMPLED.runtime_top_p}, a seed each`);
console.log('| side | mode | HTTP threads | load | output tokens/s | TTFT p50 ms | ITL p50 ms | engine TTFT / queue ms (mean) | prefill steps | rows a decode step |');
console.log('| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |');
const fixed = (v: unknown, digits: number): string => (typeof v === 'number' && Number.isFinite(v) ? v.toFixed(digits) : '-');
for (const r of rows) {
  console.log(`| ${String(r.side)} | ${String(r.mode)} | ${String(r.httpThreads ?? '')} | ${String(r.load)} | ${fixed(r.tokensPerS, 0)} | ${fixed(r.ttftP50Ms, 1)} | ${fixed(r.itlP50Ms, 2)} | ${fixed(r.engineTtftMs, 1)} / ${fixed(r.queueMs, 1)} | ${fixed(r.prefillSteps, 0)} | ${fixed(r.occupancy, 1)} |`);
}
console.log(`served / in process (64 streams, core): ${(results.servedOverInProcess as number | undefined)?.toFixed(2) ?? '-'}; in-process sampled / greedy (batch 64, core): ${(results.sampledOverGreedy as number | undefined)?.toFixed(2) ?? '-'}`);
process.exit(0);
