/**
 * What the layers above the engine cost per token, on this CPU: a stand-in engine (test/helpers/
 * stand-in-engine.ts: GPT-2 ids of news text, every running request one token a step, a step every
 * SERVE_STEP_MS whatever the event loop does, as the native continuous core) under
 *   - engine: its own `submit` streams, consumed in process;
 *   - client: the engine client in process (pipeline, tokenizer, detokenizer, stop strings);
 *   - chat SSE, completions SSE and generate_stream: `chorus serve`'s server (buildServer over the same
 *     client) in a process of its own, driven over HTTP by this one (OpenAI /v1/chat/completions and
 *     /v1/completions with stream and include_usage, as `chorus bench` sends them; Triton
 *     /v2/models/stand-in/generate_stream).
 * STREAMS concurrent streams of 128 new tokens each, REQUESTS requests per row. For each row: tokens/s,
 * against the stand-in's own rate (engine row); inter-token latency p50/p99 and TTFT p50 as the
 * client sees them; the serving process's main-thread CPU share and its CPU microseconds per token,
 * and what each layer adds per token (a row's CPU per token less the row under it); the tokens/s one
 * core's main thread would carry at that cost. On a shared machine the served rates are bounded by the
 * CPU the server gets; its CPU per token is the figure to compare.
 * Usage: node --import tsx bench/serve/overhead.ts [out.json]
 * Knobs: SERVE_STEP_MS=0.9  SERVE_STREAMS=64  SERVE_REQUESTS=640  SERVE_NEW=128  SHARED=../shared (its news articles)
 *   SERVE_PROFILE=<dir> (a CPU profile of the server's main thread while it serves, written there;
 *   bench/serve/profile-summary.ts sums it up)
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { lastValueFrom, tap } from 'rxjs';
import { drive, mainThreadCpu, sse, type LoadResult, type Trace } from './load.ts';
import { prompts, ROOT, standIn, standInClient, standInServer, textIds, tokenizer } from './stand-in.ts';

const STEP_MS = Number(process.env.SERVE_STEP_MS ?? 0.9);
const STREAMS = Number(process.env.SERVE_STREAMS ?? 64);
const REQUESTS = Number(process.env.SERVE_REQUESTS ?? 640);
const NEW = Number(process.env.SERVE_NEW ?? 128);
const PROFILE = process.env.SERVE_PROFILE;
const out = process.argv[2] ?? join(ROOT, 'bench/results', `serve-overhead-cpu-${new Date().toISOString().slice(0, 10)}.json`);

const texts = prompts();
const sampling = { temperature: 0.7, top_p: 0.9 };
const prompt = (i: number): string => texts[i % texts.length]!;

interface Row extends Omit<LoadResult, 'traces'> {
  name: string;
  cpuPercent: number;
  cpuUsPerToken: number;
  /** This process's CPU share (all its threads) while it drove the load: the client's, for served rows. */
  driverCpuPercent: number;
}

/** Runs the load with the main-thread CPU of `pid` measured around it (after a warm-up round). */
async function measure(name: string, pid: number, run: (i: number) => Promise<Trace>): Promise<Row> {
  await drive(STREAMS, STREAMS, run);
  const cpu = mainThreadCpu(pid);
  const driver = process.cpuUsage();
  const { traces, ...result } = await drive(STREAMS, REQUESTS, run);
  const used = mainThreadCpu(pid) - cpu;
  const { user, system } = process.cpuUsage(driver);
  const short = traces.filter((t) => t.completion !== NEW).length;
  if (short > 0) throw new Error(`${name}: ${short} requests got other than ${NEW} tokens`);
  return { name, ...result, cpuPercent: (100 * used) / result.seconds, cpuUsPerToken: (1e6 * used) / result.tokens, driverCpuPercent: (user + system) / 1e4 / result.seconds };
}

const ids = textIds();
const rows: Row[] = [];

// The engine alone.
const engine = standIn(ids, STEP_MS, STREAMS);
const promptIds = texts.map((t) => tokenizer.encode(t));
rows.push(
  await measure('engine', process.pid, async (i) => {
    const trace: Trace = { started: performance.now(), arrivals: [], text: '', completion: 0 };
    await lastValueFrom(engine.submit({ inputIds: promptIds[i % promptIds.length]!, params: { request_output_len: NEW, temperature: 0.7, runtime_top_p: 0.9, random_seed: i } }).pipe(tap(() => trace.arrivals.push(performance.now()))));
    trace.completion = trace.arrivals.length;
    return trace;
  }),
);
await engine.close();

// The engine client in process.
const client = standInClient(mkdtempSync(join(tmpdir(), 'serve-overhead-')), STEP_MS, STREAMS);
rows.push(
  await measure('client', process.pid, async (i) => {
    const trace: Trace = { started: performance.now(), arrivals: [], text: '', completion: 0 };
    await lastValueFrom(
      client.generate('stand-in', { text_input: prompt(i), max_tokens: NEW, seed: i, ...sampling }).pipe(
        tap((u) => {
          const choice = u.choices[0];
          if (choice !== undefined && choice.delta !== '') {
            trace.text += choice.delta;
            trace.arrivals.push(performance.now());
          }
          if (u.usage !== undefined) trace.completion = u.usage.completionTokens;
        }),
      ),
    );
    return trace;
  }),
);
await client.close();

// The server in its own process.
const { url, server } = await standInServer('serve-overhead-', STEP_MS, STREAMS, { ...process.env, ...(PROFILE === undefined ? {} : { SERVE_PROFILE: PROFILE }) });
try {
  rows.push(
    await measure('chat SSE', server.pid!, (i) =>
      sse(`${url}/v1/chat/completions`, { model: 'stand-in', messages: [{ role: 'user', content: prompt(i) }], max_tokens: NEW, seed: i, stream: true, stream_options: { include_usage: true }, ...sampling }, (data) => {
        const chunk = JSON.parse(data) as { choices: Array<{ delta?: { content?: string } }>; usage?: { completion_tokens: number } };
        return { text: chunk.choices[0]?.delta?.content ?? '', completion: chunk.usage?.completion_tokens };
      }),
    ),
  );
  rows.push(
    await measure('completions SSE', server.pid!, (i) =>
      sse(`${url}/v1/completions`, { model: 'stand-in', prompt: prompt(i), max_tokens: NEW, seed: i, stream: true, stream_options: { include_usage: true }, ...sampling }, (data) => {
        const chunk = JSON.parse(data) as { choices: Array<{ text?: string }>; usage?: { completion_tokens: number } };
        return { text: chunk.choices[0]?.text ?? '', completion: chunk.usage?.completion_tokens };
      }),
    ),
  );
  rows.push(
    await measure('generate_stream', server.pid!, (i) =>
      sse(`${url}/v2/models/stand-in/generate_stream`, { text_input: prompt(i), max_tokens: NEW, seed: i, ...sampling }, (data) => {
        const event = JSON.parse(data) as { text_output: string; usage?: { completion_tokens: number } };
        return { text: event.text_output, completion: event.usage?.completion_tokens };
      }),
    ),
  );
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.once('exit', resolve));
}

const engineRate = rows[0]!.tokensPerSecond;
const table = rows.map((r, i) => {
  const under = i === 0 ? undefined : i === 1 ? rows[0]! : rows[1]!;
  return {
    row: r.name,
    'tokens/s': Math.round(r.tokensPerSecond),
    'of engine': (r.tokensPerSecond / engineRate).toFixed(3),
    'ITL p50 ms': r.itlP50Ms.toFixed(2),
    'ITL p99 ms': r.itlP99Ms.toFixed(2),
    'TTFT p50 ms': r.ttftP50Ms.toFixed(1),
    'main thread CPU %': r.cpuPercent.toFixed(0),
    'CPU us/token': r.cpuUsPerToken.toFixed(2),
    'driver CPU %': r.driverCpuPercent.toFixed(0),
    'layer adds us/token': under === undefined ? '' : (r.cpuUsPerToken - under.cpuUsPerToken).toFixed(2),
    // What one core's main thread carries at this cost, whatever share of the CPU it got here.
    'tokens/s a core carries': Math.round(1e6 / r.cpuUsPerToken),
  };
});
console.table(table);
const ideal = (STREAMS * 1000) / STEP_MS;
for (const r of rows.slice(2)) {
  const share = (us: number): string => `${((100 * us * ideal) / 1e6).toFixed(0)}%`;
  console.log(`${r.name}: at ${Math.round(ideal)} tokens/s the server's main thread needs ${share(r.cpuUsPerToken)} of a core, ${share(r.cpuUsPerToken - rows[0]!.cpuUsPerToken)} of it above the engine's own`);
}
const result = { bench: 'serve-overhead', createdAt: new Date().toISOString(), stepMs: STEP_MS, streams: STREAMS, requests: REQUESTS, newTokens: NEW, idealTokensPerSecond: ideal, loadAverage: loadavg(), rows, table };
writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
console.log(`wrote ${out}`);
