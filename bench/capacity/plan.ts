/**
 * The capacity plan of docs/deploy.md, computed from measured figures in bench/results/: how many
 * replicas (and GPUs) serve a load of streamed requests at a p99 time-to-first-token bound, and the
 * per-replica thresholds the KEDA ScaledObjects of deploy/kubernetes/overlays/ scale on.
 *
 * A replica is a queue with `slots` servers (its batch: requests decode together, each in a slot until
 * its last token). A request holds a slot for tokens / (the replica's tokens/s / slots) seconds; its
 * time to first token is the wait for a slot plus the measured first-token time. The wait is bounded
 * with Erlang C (M/M/c: Poisson arrivals, exponential slot times), which waits longer than the
 * near-constant slot times of requests with one max_tokens, so the bound is on the safe side.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A measured figure and the results file (and its date) it comes from. */
export interface Figure {
  value: number;
  file: string;
  date: string;
}

/** What one replica was measured to do. */
export interface ReplicaFigures {
  /** Where it runs, for people: `1 x H100 80GB`. */
  hardware: string;
  model: string;
  /** Requests decoding together in the measurement (the batch's slots). */
  slots: number;
  /** Output tokens/s of the replica with `slots` requests in flight. */
  tokensPerS: Figure;
  /** Time to the first token with `slots` requests in flight, ms (p99 where measured, else median). */
  firstTokenMs: Figure;
  /** Over-HTTP tokens/s / in-process tokens/s, where the figure was measured in-process; else 1. */
  serving: Figure;
}

export interface Load {
  requestsPerS: number;
  tokensPerRequest: number;
  /** The p99 time-to-first-token bound, seconds. */
  p99FirstTokenS: number;
}

export interface Plan {
  figures: ReplicaFigures;
  /** Tokens/s of a replica once the serving factor is applied. */
  tokensPerS: number;
  /** How long a request holds its slot, seconds. */
  slotSeconds: number;
  /** Requests/s a replica completes with every slot busy. */
  saturationPerS: number;
  /** The most requests/s a replica takes with P(wait > budget) <= 1%. */
  maxPerS: number;
  /** Replicas for the load, and one more so that a drain or a rollout keeps the bound. */
  replicas: number;
  replicasWithSpare: number;
  /** KEDA targets per replica: requests in flight (75% of the slots) and requests waiting. */
  inFlightTarget: number;
  queueDepthTarget: number;
}

/** The share of the slots that KEDA keeps busy on average, leaving room while new replicas start. */
export const IN_FLIGHT_SHARE = 0.75;
/** The part of the first-token budget that waiting in the queue may take before KEDA adds replicas. */
export const QUEUE_BUDGET_SHARE = 0.25;

/** P(wait > t) in an M/M/c queue with c servers, arrival rate lambda, service rate mu per server. */
export function erlangWaitBeyond(c: number, lambda: number, mu: number, t: number): number {
  const a = lambda / mu;
  if (a >= c) return 1;
  let b = 1;
  for (let k = 1; k <= c; k++) b = (a * b) / (k + a * b);
  const waits = (c * b) / (c - a * (1 - b));
  return waits * Math.exp(-(c * mu - lambda) * t);
}

export function plan(figures: ReplicaFigures, load: Load): Plan {
  const tokensPerS = figures.tokensPerS.value * figures.serving.value;
  const slotSeconds = load.tokensPerRequest / (tokensPerS / figures.slots);
  const mu = 1 / slotSeconds;
  const saturationPerS = figures.slots * mu;
  const budget = load.p99FirstTokenS - figures.firstTokenMs.value / 1000;
  if (budget <= 0) throw new Error(`${figures.hardware}: the first token alone (${figures.firstTokenMs.value} ms) is past the ${load.p99FirstTokenS} s bound`);
  let low = 0;
  let high = saturationPerS;
  for (let i = 0; i < 60; i++) {
    const mid = (low + high) / 2;
    if (erlangWaitBeyond(figures.slots, mid, mu, budget) <= 0.01) low = mid;
    else high = mid;
  }
  const replicas = Math.ceil(load.requestsPerS / low);
  return {
    figures,
    tokensPerS,
    slotSeconds,
    saturationPerS,
    maxPerS: low,
    replicas,
    replicasWithSpare: replicas + 1,
    inFlightTarget: Math.floor(figures.slots * IN_FLIGHT_SHARE),
    queueDepthTarget: Math.max(1, Math.floor(saturationPerS * load.p99FirstTokenS * QUEUE_BUDGET_SHARE)),
  };
}

/** The date (YYYY-MM-DD) in a results file's name. */
function dateOf(file: string): string {
  const match = /\d{4}-\d{2}-\d{2}/.exec(file);
  if (match === null) throw new Error(`${file}: no date in the name`);
  return match[0];
}

function read<T>(results: string, file: string): T {
  return JSON.parse(readFileSync(join(results, file), 'utf8')) as T;
}

function find<T>(rows: readonly T[], file: string, what: string, match: (row: T) => boolean): T {
  const row = rows.find(match);
  if (row === undefined) throw new Error(`${file} has no row for ${what}`);
  return row;
}

const H100_FILE = 'speed-gpt2-fp16-step-delivery-2026-11-23-h100.json';
const CPU_ENGINE_FILE = 'cpu-chorus-vs-transformersjs-2026-11-22.json';
const CPU_HTTP_FILE = 'chorus-bench-stories-cpu-2026-11-22.json';

interface SpeedRow { path: string; setting: string; batch: number; tokens_per_s: number; ttft_ms_median: number }
interface CpuRow { model: string; setting: string; system: string; tokensPerS: number }
interface BenchSetting { summary: { concurrency: number; outputTokensPerS: number; ttftMs: { p99: number } } }

/**
 * The figures the plan stands on, read from `results` (bench/results): GPT-2 124M fp16 on an H100
 * (native engine, CUDA graphs, 64 concurrent streams, in-process) with the serving factor measured on
 * the CPU (stories260K, 16 concurrent: over HTTP against in-process), and stories260K over HTTP on 2
 * CPU cores at concurrency 16.
 */
export function measuredFigures(results: string): { h100: ReplicaFigures; h100Engine: ReplicaFigures; cpu: ReplicaFigures } {
  const speed = read<{ rows: SpeedRow[] }>(results, H100_FILE).rows;
  const streams = find(speed, H100_FILE, 'native-graph, 64 concurrent streams', (r) => r.path === 'native-graph' && r.setting === '64 concurrent streams');
  const cpuRows = read<{ rows: CpuRow[] }>(results, CPU_ENGINE_FILE).rows;
  const engine = find(cpuRows, CPU_ENGINE_FILE, 'stories260K 16 concurrent in-process', (r) => r.model === 'stories260K' && r.setting === '16 concurrent' && r.system === 'Chorus engine, in-process');
  const http = find(cpuRows, CPU_ENGINE_FILE, 'stories260K 16 concurrent over HTTP', (r) => r.model === 'stories260K' && r.setting === '16 concurrent' && r.system === 'Chorus server, over HTTP (streamed)');
  const bench = find(read<{ settings: BenchSetting[] }>(results, CPU_HTTP_FILE).settings, CPU_HTTP_FILE, 'concurrency 16', (s) => s.summary.concurrency === 16).summary;
  const at = (value: number, file: string): Figure => ({ value, file, date: dateOf(file) });
  const h100Engine: ReplicaFigures = {
    hardware: '1 x H100 80GB',
    model: 'GPT-2 124M fp16',
    slots: streams.batch,
    tokensPerS: at(streams.tokens_per_s, H100_FILE),
    firstTokenMs: at(streams.ttft_ms_median, H100_FILE),
    serving: at(1, H100_FILE),
  };
  const serving = at(http.tokensPerS / engine.tokensPerS, CPU_ENGINE_FILE);
  return {
    h100Engine,
    h100: { ...h100Engine, serving, firstTokenMs: at(streams.ttft_ms_median / serving.value, H100_FILE) },
    cpu: {
      hardware: '2 CPU cores',
      model: 'stories260K',
      slots: bench.concurrency,
      tokensPerS: at(bench.outputTokensPerS, CPU_HTTP_FILE),
      firstTokenMs: at(bench.ttftMs.p99, CPU_HTTP_FILE),
      serving: at(1, CPU_HTTP_FILE),
    },
  };
}

/** The plan for docs/deploy.md's load: 1,000 chat requests/s of 256 tokens at p99 TTFT <= 1 s. */
export const DOCS_LOAD: Load = { requestsPerS: 1000, tokensPerRequest: 256, p99FirstTokenS: 1 };

const whole = (n: number): string => Math.round(n).toLocaleString('en-US');
const fixed = (n: number, digits: number): string => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const source = (f: Figure): string => `${f.file} (${f.date})`;

/** The plan as docs/deploy.md prints it: the figures with their files and dates, then the replicas. */
export function planMarkdown(plans: readonly Plan[], load: Load): string {
  const lines = [
    `Load: ${whole(load.requestsPerS)} requests/s, ${whole(load.tokensPerRequest)} output tokens each (${whole(load.requestsPerS * load.tokensPerRequest)} tokens/s), p99 time to first token <= ${load.p99FirstTokenS} s.`,
    '',
    '| replica | model | slots | measured tokens/s | first token, ms | serving factor | tokens/s planned | slot held, s | saturates at, req/s | p99 bound holds to, req/s | replicas | with a spare | KEDA in flight / queue depth |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const p of plans) {
    const f = p.figures;
    lines.push(`| ${f.hardware} | ${f.model} | ${f.slots} | ${whole(f.tokensPerS.value)} | ${fixed(f.firstTokenMs.value, 1)} | ${fixed(f.serving.value, 3)} | ${whole(p.tokensPerS)} | ${fixed(p.slotSeconds, 3)} | ${fixed(p.saturationPerS, 1)} | ${fixed(p.maxPerS, 1)} | ${p.replicas} | ${p.replicasWithSpare} | ${p.inFlightTarget} / ${p.queueDepthTarget} |`);
  }
  const files = new Map<string, string>();
  for (const p of plans) for (const f of [p.figures.tokensPerS, p.figures.firstTokenMs, p.figures.serving]) files.set(f.file, source(f));
  lines.push('', `Figures from bench/results/: ${[...files.values()].join(', ')}.`);
  return lines.join('\n');
}
