/**
 * What HTTP costs on this CPU, in one run: stories260K's output tokens/s with 16 concurrent streams
 * in process (the engine client the server sits on: pipeline, engine, detokenizer, stop strings) and
 * served (`chorus bench` over HTTP against `chorus serve` in its own process), the same prompts,
 * lengths and sampling (temperature 0.7, top_p 0.9, a seed per request) in both. Each side is measured
 * ROUNDS times, alternating, after a warm-up; the figure is each side's median, and the verdict the
 * served rate over the in-process one (the target: at least 0.8).
 * Usage: node --import tsx bench/cpu/served-vs-in-process.ts   (ROUNDS=3 REQUESTS=64 by default)
 * Prints a table and a row for docs/benchmarks.md; writes bench/results/served-vs-in-process-cpu-<date>.json.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { BenchResult } from '../../src/bench/index.ts';
import { RepositoryClient } from '../../src/serving/index.ts';
import { clientRate, serve } from './common.ts';

const ROOT = join(import.meta.dirname, '../..');
const STORIES = join(ROOT, '../shared/models/stories260K');
const DATA = join(ROOT, '../shared/data/cnndm/summeval_cnndm_test100.jsonl');
const STREAMS = 16;
const NEW_TOKENS = 128;
const PROMPT_WORDS = 24;
const SAMPLING = { temperature: 0.7, top_p: 0.9 };
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const REQUESTS = Number(process.env.REQUESTS ?? 64);
const work = join(tmpdir(), 'chorus-served-vs-in-process');
const exec = promisify(execFile);

/** A repository serving stories260K as the pipeline `stories`, batching up to STREAMS rows. */
function repository(): string {
  const dir = join(work, 'repository');
  for (const kind of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, kind), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: ${STREAMS}\n`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\n');
  return dir;
}

/** News openings of PROMPT_WORDS words, one per line (what `chorus bench --dataset` reads). */
function prompts(): { file: string; texts: string[] } {
  const texts = readFileSync(DATA, 'utf8')
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { article: string }).article.split(/\s+/).slice(0, PROMPT_WORDS).join(' '));
  const file = join(work, 'prompts.txt');
  writeFileSync(file, `${texts.join('\n')}\n`);
  return { file, texts };
}

/** Output tokens/s of `requests` requests from STREAMS clients sending back to back, through the engine client. */
async function inProcess(client: RepositoryClient, texts: string[], requests: number, seedBase: number): Promise<number> {
  return (await clientRate(client, 'stories', STREAMS, requests, (n) => ({ text_input: texts[n % texts.length]!, max_tokens: NEW_TOKENS, min_tokens: NEW_TOKENS, ...SAMPLING, seed: seedBase + n, stream: true }))).tokensPerS;
}

/** The command line of one served measurement. */
function benchArgs(url: string, file: string, protocol: string, stream: boolean, warmup: number, seedBase: number, out: string): string[] {
  return ['bench', '--url', url, '--pipeline', 'stories', '--protocol', protocol, ...(stream ? ['--stream'] : []), '--concurrency', String(STREAMS), '--requests', String(REQUESTS), '--dataset', file, '--output-tokens', String(NEW_TOKENS), '--temperature', String(SAMPLING.temperature), '--top-p', String(SAMPLING.top_p), '--request-seed', String(seedBase), '--warmup', String(warmup), '--quiet', '--out', out];
}

/** Output tokens/s of one `chorus bench` run against the server, and its summary. */
async function served(url: string, file: string, protocol: string, stream: boolean, warmup: number, seedBase: number): Promise<BenchResult['settings'][number]['summary']> {
  const out = join(work, `bench-${protocol}-${stream}-${seedBase}.json`);
  await exec(process.execPath, [join(ROOT, 'bin/chorus.js'), ...benchArgs(url, file, protocol, stream, warmup, seedBase, out)], { env: { ...process.env, CHORUS_API_KEY: '' } });
  const result = JSON.parse(readFileSync(out, 'utf8')) as BenchResult;
  const summary = result.settings[0]!.summary;
  if (summary.ok !== summary.requests) throw new Error(`${protocol}: ${summary.requests - summary.ok} of ${summary.requests} requests failed: ${JSON.stringify(summary.errors)}`);
  return summary;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

mkdirSync(work, { recursive: true });
const dir = repository();
const { file, texts } = prompts();
const client = RepositoryClient.open(dir, { log: () => {} });
const server = await serve(dir);
const SERVED = [
  { protocol: 'openai', stream: true, label: 'served: OpenAI completions, streamed' },
  { protocol: 'generate', stream: true, label: 'served: generate_stream' },
  { protocol: 'openai', stream: false, label: 'served: OpenAI completions, whole' },
] as const;
const rates: Record<string, number[]> = { 'in process: engine client': [] };
const latency: Record<string, { ttftP50: number | undefined; itlP50: number | undefined }> = {};
try {
  // Warm-ups: the model loaded and its first batches run on both sides.
  await inProcess(client, texts, STREAMS, 10_000);
  await served(server.url, file, 'openai', true, 1, 20_000);
  for (let round = 0; round < ROUNDS; round++) {
    rates['in process: engine client']!.push(await inProcess(client, texts, REQUESTS, round * REQUESTS));
    for (const s of SERVED) {
      const summary = await served(server.url, file, s.protocol, s.stream, 0, round * REQUESTS);
      (rates[s.label] ??= []).push(summary.outputTokensPerS);
      latency[s.label] = { ttftP50: summary.ttftMs?.p50, itlP50: summary.itlMs?.p50 };
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS}: ${Object.entries(rates).map(([k, v]) => `${k} ${v.at(-1)!.toFixed(0)}`).join(', ')}\n`);
  }
} finally {
  server.child.kill('SIGTERM');
  await client.close();
}

const base = median(rates['in process: engine client']!);
const rows = Object.entries(rates).map(([system, values]) => ({ system, tokensPerS: median(values), runs: values, ratio: median(values) / base, ...latency[system] }));
const date = new Date().toISOString().slice(0, 10);
const cpu = `${cpus()[0]?.model.trim() ?? 'cpu'} (${cpus().length} cores)`;
const headline = rows.find((r) => r.system === SERVED[0].label)!;
console.log(`stories260K, ${STREAMS} concurrent streams, ${NEW_TOKENS} new tokens, temperature ${SAMPLING.temperature}, top_p ${SAMPLING.top_p}, a seed per request; ${cpu}; median of ${ROUNDS}`);
console.log('| system | output tokens/s | runs | x in process | TTFT p50 ms | ITL p50 ms |');
console.log('| --- | ---: | --- | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.system} | ${r.tokensPerS.toFixed(0)} | ${r.runs.map((v) => v.toFixed(0)).join(', ')} | ${r.ratio.toFixed(2)} | ${r.ttftP50?.toFixed(1) ?? '-'} | ${r.itlP50?.toFixed(2) ?? '-'} |`);
console.log(`\nverdict: served (OpenAI, streamed) / in process = ${headline.ratio.toFixed(2)} (target >= 0.8): ${headline.ratio >= 0.8 ? 'met' : 'NOT met'}`);
console.log(`docs row: | ${date} | CPU, ${cpu} | stories260K, ${STREAMS} streams, ${NEW_TOKENS} tokens, sampled | in process ${base.toFixed(0)} tok/s | served (OpenAI SSE) ${headline.tokensPerS.toFixed(0)} tok/s | ${headline.ratio.toFixed(2)}x | bench/cpu/served-vs-in-process.ts |`);
const out = join(ROOT, `bench/results/served-vs-in-process-cpu-${date}.json`);
writeFileSync(
  out,
  `${JSON.stringify({ createdAt: new Date().toISOString(), cpu, model: 'stories260K', streams: STREAMS, newTokens: NEW_TOKENS, promptWords: PROMPT_WORDS, sampling: SAMPLING, requestsPerRun: REQUESTS, rounds: ROUNDS, command: 'node --import tsx bench/cpu/served-vs-in-process.ts', servedCommand: `chorus ${benchArgs('<url>', '<prompts>', 'openai', true, 0, 0, '<out>').slice(0, -2).join(' ')}`, rows, servedOverInProcess: headline.ratio }, null, 2)}\n`,
);
console.log(`wrote ${out}`);
