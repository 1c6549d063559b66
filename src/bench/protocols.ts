/**
 * One timed request to a server, in each protocol `chorus bench` speaks: OpenAI completions
 * (`/v1/completions`, streamed as SSE with `stream_options.include_usage`), Triton's generate extension
 * (`/generate` or `/generate_stream`) and KServe v2 infer (a pipeline's `text_input` and fields as
 * tensors; never streamed). Streams are parsed as bytes arrive, and every chunk that carries text is
 * timestamped: the first gives the time to first token, the gaps between them the inter-token latencies.
 * Token counts are the server's own (`usage`, or KServe's `completion_tokens` output). Requests go over
 * node:http(s) with kept-alive connections: the client's own cost a token stays small beside a fast
 * server's (fetch's web streams cost several times more a chunk).
 */
import http from 'node:http';
import https from 'node:https';
import { createParser } from 'eventsource-parser';
import { ChorusError } from '../errors.ts';

export type Protocol = 'openai' | 'generate' | 'kserve';
export const PROTOCOLS: readonly Protocol[] = ['openai', 'generate', 'kserve'];

export interface Target {
  url: string;
  pipeline: string;
  protocol: Protocol;
  stream: boolean;
  apiKey?: string;
  /** Per-request limit, seconds. */
  timeoutS: number;
}

export interface Sampling {
  max_tokens?: number;
  min_tokens?: number;
  temperature?: number;
  top_p?: number;
  seed?: number;
}

/** What one request did. Times are milliseconds; `sentAt` from the start of its setting. */
export interface RequestRecord {
  index: number;
  prompt: number;
  sentAt: number;
  /** HTTP status; 0 when no response came (connection refused, reset, timed out). */
  status: number;
  ok: boolean;
  error?: string;
  latencyMs: number;
  /** Streamed requests only: to the first chunk with text. */
  ttftMs?: number;
  /** Streamed requests only: gaps between consecutive chunks with text. */
  itlMs: number[];
  chunks: number;
  promptTokens?: number;
  outputTokens?: number;
  outputChars: number;
}

interface Usage {
  promptTokens?: number;
  outputTokens?: number;
}

function headers(target: Target): Record<string, string> {
  return { 'content-type': 'application/json', ...(target.apiKey ? { authorization: `Bearer ${target.apiKey}` } : {}) };
}

function endpoint(target: Target): string {
  const base = target.url.replace(/\/+$/, '');
  const model = encodeURIComponent(target.pipeline);
  if (target.protocol === 'openai') return `${base}/v1/completions`;
  if (target.protocol === 'generate') return `${base}/v2/models/${model}/${target.stream ? 'generate_stream' : 'generate'}`;
  return `${base}/v2/models/${model}/infer`;
}

function scalarInput(name: string, value: number): { name: string; shape: number[]; datatype: string; data: number[] } {
  return { name, shape: [1, 1], datatype: Number.isInteger(value) && name !== 'temperature' && name !== 'top_p' ? 'INT32' : 'FP32', data: [value] };
}

function body(target: Target, prompt: string, sampling: Sampling): unknown {
  if (target.protocol === 'openai') {
    return { model: target.pipeline, prompt, ...sampling, stream: target.stream, ...(target.stream ? { stream_options: { include_usage: true } } : {}) };
  }
  if (target.protocol === 'generate') return { text_input: prompt, ...sampling };
  return {
    inputs: [
      { name: 'text_input', shape: [1, 1], datatype: 'BYTES', data: [prompt] },
      ...Object.entries(sampling)
        .filter(([, v]) => v !== undefined)
        .map(([name, v]) => scalarInput(name, v as number)),
    ],
  };
}

/** The text and token counts in one JSON answer or stream event of the protocol. */
function read(protocol: Protocol, event: unknown): { text: string; usage: Usage; error?: string } {
  const e = (event ?? {}) as Record<string, unknown>;
  if (e.error !== undefined) {
    const err = e.error as { message?: string } | string;
    return { text: '', usage: {}, error: typeof err === 'string' ? err : (err.message ?? JSON.stringify(err)) };
  }
  if (protocol === 'openai') {
    const choices = (e.choices as Array<{ text?: string; message?: { content?: string } }> | undefined) ?? [];
    const usage = e.usage as { prompt_tokens?: number; completion_tokens?: number } | undefined;
    return { text: choices.map((c) => c.text ?? c.message?.content ?? '').join(''), usage: { promptTokens: usage?.prompt_tokens, outputTokens: usage?.completion_tokens } };
  }
  if (protocol === 'generate') {
    const usage = e.usage as { prompt_tokens?: number; completion_tokens?: number } | undefined;
    return { text: typeof e.text_output === 'string' ? e.text_output : '', usage: { promptTokens: usage?.prompt_tokens, outputTokens: usage?.completion_tokens } };
  }
  const outputs = (e.outputs as Array<{ name: string; data: unknown[] }> | undefined) ?? [];
  const value = (name: string): unknown => outputs.find((o) => o.name === name)?.data[0];
  const count = (name: string): number | undefined => (typeof value(name) === 'number' ? (value(name) as number) : undefined);
  return { text: typeof value('text_output') === 'string' ? (value('text_output') as string) : '', usage: { promptTokens: count('prompt_tokens'), outputTokens: count('completion_tokens') } };
}

/** The error message of a non-2xx answer, from the protocol's error body when there is one. */
function errorText(status: number, text: string): string {
  try {
    const parsed = JSON.parse(text) as { error?: string | { message?: string } };
    const message = typeof parsed.error === 'string' ? parsed.error : parsed.error?.message;
    if (message) return `${status}: ${message}`;
  } catch {
    // not JSON: the raw text below
  }
  return `${status}: ${text.slice(0, 200)}`;
}

/**
 * The server's count of a text's tokens: the `usage` of a one-token request (undefined when the server
 * reports none). A failed request throws, naming the server and its answer.
 */
export async function countPromptTokens(target: Target, text: string): Promise<number | undefined> {
  const record = await timedRequest({ ...target, stream: false }, text, { max_tokens: 1 }, -1, 0, performance.now());
  if (!record.ok) throw new ChorusError('CHORUS_SERVER_UNAVAILABLE', `${target.url}: the first request to ${target.pipeline} (${target.protocol}) failed: ${record.error}`, { param: '--url', value: target.url });
  return record.promptTokens;
}

/** Sends one request and times it. Never throws: failures are records with `ok: false`. */
export async function timedRequest(target: Target, prompt: string, sampling: Sampling, index: number, promptIndex: number, origin: number): Promise<RequestRecord> {
  const started = performance.now();
  const record: RequestRecord = { index, prompt: promptIndex, sentAt: started - origin, status: 0, ok: false, latencyMs: 0, itlMs: [], chunks: 0, outputChars: 0 };
  const usage: Usage = {};
  const take = (u: Usage): void => {
    if (u.promptTokens !== undefined) usage.promptTokens = u.promptTokens;
    if (u.outputTokens !== undefined) usage.outputTokens = u.outputTokens;
  };
  const signal = AbortSignal.timeout(target.timeoutS * 1000);
  try {
    const response = await post(endpoint(target), headers(target), JSON.stringify(body(target, prompt, sampling)), signal);
    record.status = response.statusCode ?? 0;
    if (record.status < 200 || record.status >= 300) {
      record.error = errorText(record.status, await readText(response));
    } else if (target.stream) {
      let last: number | undefined;
      const parser = createParser({
        onEvent: (event) => {
          if (event.data === '[DONE]') return;
          const now = performance.now();
          record.chunks++;
          const got = read(target.protocol, JSON.parse(event.data));
          if (got.error !== undefined) record.error = `stream: ${got.error}`;
          take(got.usage);
          if (got.text === '') return;
          record.outputChars += got.text.length;
          if (last === undefined) record.ttftMs = now - started;
          else record.itlMs.push(now - last);
          last = now;
        },
      });
      response.setEncoding('utf8');
      for await (const text of response as AsyncIterable<string>) parser.feed(text);
      record.ok = record.error === undefined;
    } else {
      const got = read(target.protocol, JSON.parse(await readText(response)));
      record.chunks = 1;
      record.outputChars = got.text.length;
      take(got.usage);
      if (got.error !== undefined) record.error = got.error;
      record.ok = record.error === undefined;
    }
  } catch (error) {
    record.error = signal.aborted ? `no answer within ${target.timeoutS} s` : `${(error as Error).message}${(error as { cause?: Error }).cause ? ` (${(error as { cause: Error }).cause.message})` : ''}`;
  }
  record.latencyMs = performance.now() - started;
  record.promptTokens = usage.promptTokens;
  record.outputTokens = usage.outputTokens;
  return record;
}

// Kept-alive connections, as many as requests run at once.
const agents = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };

/** POSTs `body` to `url`; resolves with the response once its head has come. */
function post(url: string, head: Record<string, string>, body: string, signal: AbortSignal): Promise<http.IncomingMessage> {
  const secure = new URL(url).protocol === 'https:';
  return new Promise((resolve, reject) => {
    const request = (secure ? https : http).request(url, { method: 'POST', headers: { ...head, 'content-length': String(Buffer.byteLength(body)) }, agent: secure ? agents.https : agents.http, signal }, resolve);
    request.once('error', reject);
    request.end(body);
  });
}

/** A response's whole body as text. */
async function readText(response: http.IncomingMessage): Promise<string> {
  response.setEncoding('utf8');
  let text = '';
  for await (const chunk of response as AsyncIterable<string>) text += chunk;
  return text;
}
