/**
 * The HTTP client side of `chorus infer --url` and `chorus client`: KServe v2 infer with JSON tensors,
 * and Triton's generate extension, plain or streamed (Server-Sent Events). A refusal from the server
 * becomes a ChorusError carrying its status and message.
 */
import { createParser } from 'eventsource-parser';
import type { Datatype } from '../config/index.ts';
import type { Tensor } from '../ensemble/index.ts';
import { ChorusError } from '../errors.ts';
import { parseExactJson, stringifyExactJson } from '../util/exact-json.ts';

/** Where the server is and how to reach it. */
export interface Remote {
  /** The server's base URL (`http://host:8000`). */
  url: string;
  /** Sent as `Authorization: Bearer <apiKey>`. Default: none. */
  apiKey?: string;
}

function endpoint(remote: Remote, path: string): string {
  const base = /^[a-z]+:\/\//i.test(remote.url) ? remote.url : `http://${remote.url}`;
  return `${base.replace(/\/+$/, '')}${path}`;
}

async function post(remote: Remote, path: string, body: unknown): Promise<Response> {
  let response: Response;
  try {
    response = await fetch(endpoint(remote, path), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(remote.apiKey === undefined ? {} : { authorization: `Bearer ${remote.apiKey}` }) },
      body: stringifyExactJson(body),
    });
  } catch (error) {
    throw new ChorusError('CHORUS_SERVER_UNAVAILABLE', `no answer from ${endpoint(remote, path)}: ${(error as Error).cause ?? (error as Error).message}`, { cause: error });
  }
  if (!response.ok) {
    const text = await response.text();
    let message = text;
    try {
      message = (JSON.parse(text) as { error?: string }).error ?? text;
    } catch {
      // Not JSON: the text itself says what went wrong.
    }
    throw new ChorusError(response.status === 401 ? 'CHORUS_UNAUTHORIZED' : response.status === 404 ? 'CHORUS_NOT_FOUND' : response.status < 500 ? 'CHORUS_INVALID_ARGUMENT' : 'CHORUS_SERVER_UNAVAILABLE', `${endpoint(remote, path)} answered ${response.status}: ${message}`);
  }
  return response;
}

/** KServe v2 infer: tensors in, the answer's tensors by name (in the server's order). */
export async function inferRemote(remote: Remote, model: string, inputs: Record<string, Tensor>, outputs?: readonly string[]): Promise<Record<string, Tensor>> {
  const body = {
    inputs: Object.entries(inputs).map(([name, t]) => ({ name, shape: t.shape, datatype: t.datatype, data: t.data })),
    ...(outputs === undefined ? {} : { outputs: outputs.map((name) => ({ name })) }),
  };
  const response = await post(remote, `/v2/models/${encodeURIComponent(model)}/infer`, body);
  const answer = parseExactJson(await response.text()) as { outputs: Array<{ name: string; datatype: Datatype; shape: number[]; data: Tensor['data'] }> };
  return Object.fromEntries(answer.outputs.map((o) => [o.name, { datatype: o.datatype, shape: o.shape, data: o.data }]));
}

/** One answer of the generate extension. */
export interface GenerateAnswer {
  text_output: string;
  finish_reason?: string;
  usage?: { prompt_tokens: number; completion_tokens: number };
}

/** `/generate`: the whole answer. */
export async function generateRemote(remote: Remote, pipeline: string, fields: Record<string, unknown>): Promise<GenerateAnswer> {
  const response = await post(remote, `/v2/models/${encodeURIComponent(pipeline)}/generate`, fields);
  return (await response.json()) as GenerateAnswer;
}

/** `/generate_stream`: each event as it comes (its `text_output` is the delta); an error event throws. */
export async function* generateStreamRemote(remote: Remote, pipeline: string, fields: Record<string, unknown>): AsyncGenerator<GenerateAnswer> {
  const response = await post(remote, `/v2/models/${encodeURIComponent(pipeline)}/generate_stream`, fields);
  const events: string[] = [];
  const parser = createParser({ onEvent: (event) => events.push(event.data) });
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    for (const data of events.splice(0)) {
      const event = JSON.parse(data) as GenerateAnswer & { error?: string };
      if (event.error !== undefined) throw new ChorusError('CHORUS_SERVER_UNAVAILABLE', `${pipeline}: the stream failed: ${event.error}`);
      yield event;
    }
  }
}
