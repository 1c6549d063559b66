/**
 * Soak: `chorus serve` (the bundled repository, stories pointed at ../shared's stories260K) under mixed
 * load for N minutes: OpenAI chat and completions, Triton generate, KServe infer, streamed and not,
 * streams cancelled after a few events, and a share of bad requests. Every sample period the load
 * pauses until nothing is in flight, then the server's resident memory (/proc), open file descriptors,
 * active handles and resources (/metrics: prom-client's process metrics) and the engine's running and
 * waiting requests are read. Samples start after a warm-up period; RSS growth is the last sample's over
 * the median of the first three, and its trend a least-squares slope over all of them.
 * Goals: RSS grows by less than 5%, the counts at rest stay where they were, no request fails.
 * Usage: node --import tsx bench/soak/soak.ts [--minutes 30] [--sample-seconds 60] [--concurrency 6]
 * Prints a table; writes bench/results/soak-<date>-<minutes>min.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { LOAD_KINDS, runRequest, type Tally } from './load.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '30' },
    'sample-seconds': { type: 'string', default: '60' },
    'warmup-seconds': { type: 'string', default: '60' },
    concurrency: { type: 'string', default: '6' },
  },
});
const positive = (name: string, text: string): number => {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number, got ${text}`);
  return value;
};
const minutes = positive('minutes', values.minutes);
const sampleMs = positive('sample-seconds', values['sample-seconds']) * 1000;
const warmupMs = positive('warmup-seconds', values['warmup-seconds']) * 1000;
const concurrency = Math.round(positive('concurrency', values.concurrency));
const ROOT = join(import.meta.dirname, '../..');
const STORIES = join(ROOT, '../shared/models/stories260K/stories260K.bin');

/**
 * One reading at rest. Open connections are counted apart (the load's keep-alive sockets, which the
 * client's pool keeps for a while, at most a couple per concurrent client; a leak of the cancelled ones
 * would grow with the number of cancels): handles, resources and file descriptors are the rest.
 */
interface Sample {
  atS: number;
  rssMiB: number;
  /** V8's heap in use at rest: what JavaScript still holds, apart from the heap's own sizing. */
  heapUsedMiB: number;
  connections: number;
  fds: number;
  activeHandles: number;
  activeResources: number;
  running: number;
  waiting: number;
  pending: number;
  requests: number;
}

const cache = mkdtempSync(join(tmpdir(), 'chorus-soak-'));
const server = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', '--port', '0', '--grpc-port', '0', '--quiet', '--set-source', `stories=${STORIES}`], {
  cwd: ROOT,
  env: { ...process.env, HF_HUB_OFFLINE: '1', CHORUS_CACHE: cache },
  stdio: ['ignore', 'ignore', 'pipe'],
});
let serverLog = '';
const url = await new Promise<string>((resolve, reject) => {
  server.stderr!.on('data', (chunk: Buffer) => {
    serverLog += chunk.toString();
    const match = /serving .* on (http:\/\/[\d.:]+)/.exec(serverLog);
    if (match) resolve(match[1]!);
  });
  server.on('exit', (code) => reject(new Error(`chorus serve exited (${code}): ${serverLog}`)));
});
let died = false;
server.on('exit', () => (died = true));

/** The value of a metric (summed over its label sets, or of those holding `label`) in /metrics' text. */
function metric(text: string, name: string, label?: string): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`))
    .filter((line) => label === undefined || line.includes(label))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

const tally: Tally = { byKind: Object.fromEntries(LOAD_KINDS.map((k) => [k, { ok: 0, cancelled: 0, rejected: 0, failed: 0 }])), failures: [] };
const started = performance.now();
const samples: Sample[] = [];
let paused = false;
let inFlight = 0;
let stop = false;

/** The least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((sum, [x]) => sum + x, 0) / n;
  const my = points.reduce((sum, [, y]) => sum + y, 0) / n;
  const sxx = points.reduce((sum, [x]) => sum + (x - mx) ** 2, 0);
  return sxx === 0 ? 0 : points.reduce((sum, [x, y]) => sum + (x - mx) * (y - my), 0) / sxx;
}

async function sample(): Promise<Sample> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const status = readFileSync(`/proc/${server.pid}/status`, 'utf8');
  const fds = readdirSync(`/proc/${server.pid}/fd`).map((fd) => {
    try {
      return readlinkSync(`/proc/${server.pid}/fd/${fd}`);
    } catch {
      return '';
    }
  });
  const connections = metric(text, 'nodejs_active_handles', 'type="Socket"');
  return {
    atS: Math.round((performance.now() - started) / 1000),
    rssMiB: Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024,
    heapUsedMiB: Number((metric(text, 'nodejs_heap_size_used_bytes') / 2 ** 20).toFixed(1)),
    connections,
    fds: fds.filter((target) => !target.startsWith('socket:')).length,
    activeHandles: metric(text, 'nodejs_active_handles_total') - connections,
    activeResources: metric(text, 'nodejs_active_resources_total') - metric(text, 'nodejs_active_resources', 'type="TCPSocketWrap"'),
    running: metric(text, 'chorus_engine_running_requests'),
    waiting: metric(text, 'chorus_engine_queue_depth'),
    pending: metric(text, 'nv_inference_pending_request_count'),
    requests: Object.values(tally.byKind).reduce((sum, t) => sum + t.ok + t.cancelled + t.rejected + t.failed, 0),
  };
}

async function worker(seed: number): Promise<void> {
  let state = seed;
  const random = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32;
  };
  while (!stop) {
    if (paused) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    inFlight++;
    try {
      await runRequest(url, LOAD_KINDS[Math.floor(random() * LOAD_KINDS.length)]!, random, tally);
    } finally {
      inFlight--;
    }
  }
}

/** Pauses the load, waits until nothing is in flight (and the server has settled), samples, resumes. */
async function quietSample(): Promise<Sample> {
  paused = true;
  while (inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const s = await sample();
  paused = false;
  return s;
}

const workers = Array.from({ length: concurrency }, (_, i) => worker(1 + i * 7919));
const end = started + minutes * 60_000;
await new Promise((resolve) => setTimeout(resolve, Math.min(warmupMs, minutes * 30_000)));
samples.push(await quietSample());
process.stderr.write(`after warm-up: ${JSON.stringify(samples[0])}\n`);
while (performance.now() < end && !died) {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(sampleMs, end - performance.now()))));
  if (died) break;
  samples.push(await quietSample());
  process.stderr.write(`${JSON.stringify(samples.at(-1))}\n`);
}
stop = true;
await Promise.all(workers);
const diedUnderLoad = died;
server.kill('SIGTERM');
await new Promise((resolve) => (died ? resolve(undefined) : server.on('exit', resolve)));
rmSync(cache, { recursive: true, force: true });

const first = samples[0]!;
const final = samples.at(-1)!;
// The baseline: the median of the first three samples (the first can still hold garbage from the warm-up).
const baseline = [...samples.slice(0, 3).map((s) => s.rssMiB)].sort((a, b) => a - b)[Math.floor(Math.min(3, samples.length) / 2)]!;
const peakRss = Math.max(...samples.map((s) => s.rssMiB));
const summary = {
  serverStayedUp: !diedUnderLoad,
  rssBaselineMiB: Number(baseline.toFixed(1)),
  rssLastMiB: Number(final.rssMiB.toFixed(1)),
  rssGrowthPercent: Number((((final.rssMiB - baseline) / baseline) * 100).toFixed(2)),
  rssPeakGrowthPercent: Number((((peakRss - baseline) / baseline) * 100).toFixed(2)),
  rssTrendMiBPerHour: Number(slope(samples.map((s) => [s.atS / 3600, s.rssMiB])).toFixed(2)),
  heapUsedMiB: { first: first.heapUsedMiB, last: final.heapUsedMiB, max: Math.max(...samples.map((s) => s.heapUsedMiB)), trendPerHour: Number(slope(samples.map((s) => [s.atS / 3600, s.heapUsedMiB])).toFixed(2)) },
  connections: { first: first.connections, last: final.connections, max: Math.max(...samples.map((s) => s.connections)) },
  fds: { first: first.fds, last: final.fds, max: Math.max(...samples.map((s) => s.fds)) },
  activeHandles: { first: first.activeHandles, last: final.activeHandles, max: Math.max(...samples.map((s) => s.activeHandles)) },
  activeResources: { first: first.activeResources, last: final.activeResources, max: Math.max(...samples.map((s) => s.activeResources)) },
  atRest: { running: final.running, waiting: final.waiting, pending: final.pending },
};
const goals = {
  rssGrowthUnder5Percent: summary.rssGrowthPercent < 5,
  countsFlat:
    final.fds <= first.fds &&
    final.activeHandles <= first.activeHandles &&
    final.activeResources <= first.activeResources &&
    Math.max(...samples.map((s) => s.connections)) <= 2 * concurrency + 2 &&
    final.running === 0 &&
    final.waiting === 0 &&
    final.pending === 0,
  serverStayedUp: !diedUnderLoad,
};

console.log(`soak: ${minutes} min, ${concurrency} concurrent, ${final.requests} requests, server ${diedUnderLoad ? 'DIED' : 'stayed up'}`);
console.log('kind                     ok  cancelled  rejected(4xx)  failed');
for (const [kind, t] of Object.entries(tally.byKind)) console.log(`${kind.padEnd(22)} ${String(t.ok).padStart(5)} ${String(t.cancelled).padStart(10)} ${String(t.rejected).padStart(14)} ${String(t.failed).padStart(7)}`);
console.log('\n   at s   RSS MiB   heap MiB   connections   fds   handles   resources   running   waiting   pending');
for (const s of samples) console.log(`${String(s.atS).padStart(7)} ${s.rssMiB.toFixed(1).padStart(9)} ${s.heapUsedMiB.toFixed(1).padStart(10)} ${String(s.connections).padStart(13)} ${String(s.fds).padStart(5)} ${String(s.activeHandles).padStart(9)} ${String(s.activeResources).padStart(11)} ${String(s.running).padStart(9)} ${String(s.waiting).padStart(9)} ${String(s.pending).padStart(9)}`);
console.log(`\nRSS ${summary.rssBaselineMiB} -> ${summary.rssLastMiB} MiB: ${summary.rssGrowthPercent}% (peak ${summary.rssPeakGrowthPercent}%, trend ${summary.rssTrendMiBPerHour} MiB/h); goal < 5%: ${goals.rssGrowthUnder5Percent ? 'met' : 'MISSED'}`);
console.log(`counts at rest flat (fds, handles, resources besides connections; connections within what the clients' pools hold; nothing running): ${goals.countsFlat ? 'yes' : 'NO'}`);
if (tally.failures.length > 0) console.log(`first failures:\n  ${tally.failures.slice(0, 5).join('\n  ')}`);

const date = new Date().toISOString().slice(0, 10);
mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
const file = join(ROOT, 'bench/results', `soak-${date}-${minutes}min.json`);
writeFileSync(
  file,
  `${JSON.stringify({ date: new Date().toISOString(), machine: { cpus: cpus().length, cpu: cpus()[0]?.model, node: process.version }, settings: { minutes, sampleSeconds: sampleMs / 1000, warmupSeconds: warmupMs / 1000, concurrency, model: 'stories260K (llama2.c), CPU' }, goals, summary, requests: tally.byKind, failures: tally.failures.slice(0, 20), samples }, null, 2)}\n`,
);
console.log(`wrote ${file}`);
process.exitCode = goals.rssGrowthUnder5Percent && goals.countsFlat && goals.serverStayedUp && tally.failures.length === 0 ? 0 : 1;
