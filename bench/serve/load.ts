/**
 * The overhead bench's load and its measures: `streams` workers, each running requests one after the
 * other until `requests` are done; per request its start, its first token's time and every later
 * token's arrival; the main thread's CPU time of a process from /proc.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';

/** One request as seen by its client: when it started, when each token (or group of tokens) came. */
export interface Trace {
  started: number;
  /** Arrival times, one per token; tokens that arrive together share a time. */
  arrivals: number[];
  text: string;
  /** Tokens generated, as the answer's usage says (the arrivals may be fewer: a delta can hold two). */
  completion: number;
}

export interface LoadResult {
  tokens: number;
  seconds: number;
  tokensPerSecond: number;
  itlP50Ms: number;
  itlP99Ms: number;
  ttftP50Ms: number;
  traces: Trace[];
}

/** Runs `requests` requests over `streams` concurrent workers; `run(i)` runs request i to its end. */
export async function drive(streams: number, requests: number, run: (i: number) => Promise<Trace>): Promise<LoadResult> {
  const traces: Trace[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: streams }, async () => {
      while (next < requests) traces.push(await run(next++));
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const tokens = traces.reduce((sum, t) => sum + t.completion, 0);
  const gaps = traces.flatMap((t) => t.arrivals.slice(1).map((at, i) => at - t.arrivals[i]!));
  const ttft = traces.map((t) => (t.arrivals[0] ?? Number.NaN) - t.started);
  return { tokens, seconds, tokensPerSecond: tokens / seconds, itlP50Ms: quantile(gaps, 0.5), itlP99Ms: quantile(gaps, 0.99), ttftP50Ms: quantile(ttft, 0.5), traces };
}

export function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** CPU seconds the main thread of process `pid` has used (utime + stime of its first task). */
export function mainThreadCpu(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of stat (utime, stime), counted from the state field (3rd).
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });

/**
 * POSTs `body` to `url` and reads its Server-Sent Events; `tokens(data)` says what one event's data
 * holds: the text it adds, and the usage's completion tokens on the event that has it.
 */
export function sse(url: string, body: unknown, tokens: (data: string) => { text: string; completion?: number }): Promise<Trace> {
  return new Promise<Trace>((resolve, reject) => {
    const trace: Trace = { started: performance.now(), arrivals: [], text: '', completion: 0 };
    const payload = JSON.stringify(body);
    const request = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (response) => {
      if (response.statusCode !== 200) {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => reject(new Error(`${url}: ${response.statusCode} ${text}`)));
        return;
      }
      response.setEncoding('utf8');
      let buffer = '';
      response.on('data', (chunk: string) => {
        const now = performance.now();
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          if (!event.startsWith('data: ')) continue;
          const data = event.slice(6);
          if (data === '[DONE]') continue;
          const got = tokens(data);
          if (got.text !== '') {
            trace.text += got.text;
            trace.arrivals.push(now);
          }
          if (got.completion !== undefined) trace.completion = got.completion;
        }
      });
      response.on('end', () => resolve(trace));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(payload);
  });
}
