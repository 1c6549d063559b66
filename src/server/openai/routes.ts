/**
 * OpenAI-compatible routes over the repository's pipelines: `/v1/models`, `/v1/completions` and
 * `/v1/chat/completions`, streamed as `chat.completion.chunk` / `text_completion` SSE chunks ending with
 * `data: [DONE]`, or answered whole. `n` runs n requests (seeds seed, seed+1, ... when a seed is given);
 * extra sampling fields (`top_k`, `repetition_penalty`, `min_tokens`, `beam_width`) are taken as vLLM
 * takes them. `logprobs` (and chat's `top_logprobs`) give each token's log-probability under the
 * distribution it was drawn from, and its step's most likely alternatives. What Chorus cannot honour
 * (`echo`, `logit_bias`, `suffix`, `best_of`, `tools`) is refused by name rather than ignored.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { concat, defer, from, map, merge, mergeMap, of, tap, type Observable } from 'rxjs';
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { EngineClient, PipelineUpdate, TextRequest, TokenLogProb } from '../../serving/index.ts';
import { cancelOnClose, sendEvents } from '../disconnect.ts';
import { openAiErrorBody } from '../errors.ts';

const SAMPLING = ['max_tokens', 'temperature', 'top_p', 'seed', 'stop', 'presence_penalty', 'frequency_penalty', 'top_k', 'repetition_penalty', 'min_tokens', 'beam_width'] as const;
const REFUSED: Record<string, (value: unknown) => boolean> = {
  echo: (v) => v === true,
  logit_bias: (v) => v !== undefined && v !== null && Object.keys(v as object).length > 0,
  suffix: (v) => v !== undefined && v !== null && v !== '',
  best_of: (v) => v !== undefined && v !== null && v !== 1,
  tools: (v) => Array.isArray(v) && v.length > 0,
};
const ACCEPTED = new Set(['model', 'prompt', 'messages', 'n', 'stream', 'stream_options', 'user', 'max_completion_tokens', 'logprobs', 'top_logprobs', ...SAMPLING, ...Object.keys(REFUSED)]);

interface Choice {
  index: number;
  text: string;
  finishReason: string | null;
  logprobs: TokenLogProb[];
}

const bytes = (text: string): number[] => [...Buffer.from(text, 'utf8')];

/** OpenAI's logprobs object: chat's `content` list, or the completions API's parallel lists. */
function logprobsBody(kind: 'chat' | 'completion', tokens: TokenLogProb[], offset: number): unknown {
  if (kind === 'chat') {
    return { content: tokens.map((t) => ({ token: t.text, logprob: t.logprob, bytes: bytes(t.text), top_logprobs: t.top.map((a) => ({ token: a.text, logprob: a.logprob, bytes: bytes(a.text) })) })) };
  }
  const textOffset: number[] = [];
  let at = offset;
  for (const t of tokens) {
    textOffset.push(at);
    at += t.text.length;
  }
  return { tokens: tokens.map((t) => t.text), token_logprobs: tokens.map((t) => t.logprob), top_logprobs: tokens.map((t) => Object.fromEntries(t.top.map((a) => [a.text, a.logprob]))), text_offset: textOffset };
}

export function registerOpenAi(app: FastifyInstance, client: EngineClient): void {
  app.get('/v1/models', async () => ({
    object: 'list',
    data: client.models('pipeline').map((m) => ({ id: m.name, object: 'model', created: 0, owned_by: 'chorus' })),
  }));
  app.get<{ Params: { model: string } }>('/v1/models/:model', async (request) => {
    pipelineOf(client, request.params.model);
    return { id: request.params.model, object: 'model', created: 0, owned_by: 'chorus' };
  });
  app.post('/v1/completions', async (request, reply) => handle(client, request, reply, 'completion'));
  app.post('/v1/chat/completions', async (request, reply) => handle(client, request, reply, 'chat'));
}

function pipelineOf(client: EngineClient, model: unknown): string {
  if (typeof model !== 'string' || model === '') throw invalidArgument('model', 'the name of a model (a pipeline)', model);
  const pipelines = client.models('pipeline').map((m) => m.name);
  if (!pipelines.includes(model)) throw new ChorusError('CHORUS_NOT_FOUND', `The model \`${model}\` does not exist; models: ${pipelines.join(', ')}`, { param: 'model', value: model });
  return model;
}

function finishReason(reason: string | undefined): string | null {
  if (reason === undefined) return null;
  return reason === 'length' ? 'length' : 'stop';
}

async function handle(client: EngineClient, request: FastifyRequest, reply: FastifyReply, kind: 'chat' | 'completion'): Promise<unknown> {
  const body = request.body as Record<string, unknown> | null;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidArgument('body', 'a JSON object', body);
  for (const field of Object.keys(body)) if (!ACCEPTED.has(field)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `Unrecognized request argument supplied: ${field}`, { param: field });
  for (const [field, refused] of Object.entries(REFUSED)) {
    if (refused(body[field])) throw new ChorusError('CHORUS_UNSUPPORTED', `${field} is not supported by this server`, { param: field });
  }
  const model = pipelineOf(client, body.model);
  const n = body.n ?? 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 16) throw invalidArgument('n', 'an integer in [1, 16]', n);
  const stream = body.stream ?? false;
  if (typeof stream !== 'boolean') throw invalidArgument('stream', 'true or false', stream);
  const options = body.stream_options;
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) throw invalidArgument('stream_options', 'an object', options);
  const includeUsage = (options as { include_usage?: unknown } | null)?.include_usage === true;
  const base: TextRequest = { stream };
  let logprobs = false;
  if (kind === 'chat') {
    if (body.logprobs !== undefined && body.logprobs !== null && typeof body.logprobs !== 'boolean') throw invalidArgument('logprobs', 'true or false', body.logprobs);
    logprobs = body.logprobs === true;
    const top = body.top_logprobs ?? 0;
    if (typeof top !== 'number' || !Number.isInteger(top) || top < 0 || top > 20) throw invalidArgument('top_logprobs', 'an integer in [0, 20]', top);
    if (top > 0 && !logprobs) throw invalidArgument('top_logprobs', 'used with logprobs: true', top);
    if (top > 0) base.top_logprobs = top;
  } else {
    const top = body.logprobs ?? null;
    if (body.top_logprobs !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', 'top_logprobs belongs to chat completions; completions take logprobs: <count>', { param: 'top_logprobs' });
    if (top !== null && (typeof top !== 'number' || !Number.isInteger(top) || top < 0 || top > 5)) throw invalidArgument('logprobs', 'an integer in [0, 5]', top);
    logprobs = top !== null;
    if (typeof top === 'number' && top > 0) base.top_logprobs = top;
  }
  if (logprobs) base.logprobs = true;
  for (const field of SAMPLING) if (body[field] !== undefined && body[field] !== null) (base as Record<string, unknown>)[field] = body[field];
  if (body.max_completion_tokens !== undefined && body.max_completion_tokens !== null) base.max_tokens = body.max_completion_tokens as number;
  let prompts: TextRequest[];
  if (kind === 'chat') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw invalidArgument('messages', 'a non-empty list of messages', body.messages);
    const messages = (body.messages as unknown[]).map((m, i) => {
      const message = m as { role?: unknown; content?: unknown } | null;
      if (typeof message !== 'object' || message === null || typeof message.role !== 'string') throw invalidArgument(`messages[${i}]`, 'an object with a role', m);
      const content = Array.isArray(message.content)
        ? (message.content as Array<{ type?: string; text?: string }>).map((part, j) => {
            if (part?.type !== 'text' || typeof part.text !== 'string') throw invalidArgument(`messages[${i}].content[${j}]`, 'a text part {type: "text", text}', part);
            return part.text;
          }).join('')
        : message.content;
      if (typeof content !== 'string') throw invalidArgument(`messages[${i}].content`, 'a string', message.content);
      return { role: message.role, content };
    });
    prompts = [{ ...base, messages }];
  } else {
    const prompt = body.prompt;
    const list = typeof prompt === 'string' ? [prompt] : prompt;
    if (!Array.isArray(list) || list.length === 0 || list.some((p) => typeof p !== 'string')) throw invalidArgument('prompt', 'a string or a non-empty list of strings', prompt);
    prompts = (list as string[]).map((text) => ({ ...base, text_input: text }));
  }
  // n samples per prompt: with a seed, seed + i; without, each its own random seed (as OpenAI's n does).
  const runs = prompts.flatMap((p) => Array.from({ length: n }, (_, i) => (n === 1 ? p : { ...p, seed: typeof p.seed === 'number' ? p.seed + i : Math.floor(Math.random() * 2 ** 31) })));
  const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const countUsage = (u: PipelineUpdate, runIndex: number): void => {
    if (u.usage === undefined) return;
    if (runIndex % n === 0) usage.prompt_tokens += u.usage.promptTokens;
    usage.completion_tokens += u.usage.completionTokens;
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  };
  // Each run's updates, its choices renumbered into the response's.
  const updates: Observable<{ choice: Choice; delta: string }> = merge(
    ...runs.map((run, r) =>
      client.generate(model, run).pipe(
        tap((u) => countUsage(u, r)),
        mergeMap((u) => from(u.choices.filter((c) => c.index === 0).map((c) => ({ choice: { index: r, text: c.text, finishReason: finishReason(c.finishReason), logprobs: c.logprobs ?? [] }, delta: c.delta })))),
      ),
    ),
  );
  const object = kind === 'chat' ? 'chat.completion' : 'text_completion';
  if (!stream) {
    const choices: Choice[] = runs.map((_, index) => ({ index, text: '', finishReason: null, logprobs: [] }));
    await cancelOnClose(
      request,
      reply,
      updates.pipe(tap(({ choice }) => (choices[choice.index] = { ...choice, logprobs: [...choices[choice.index]!.logprobs, ...choice.logprobs] }))),
    );
    return {
      id,
      object,
      created,
      model,
      choices: choices.map((c) =>
        kind === 'chat'
          ? { index: c.index, message: { role: 'assistant', content: c.text }, finish_reason: c.finishReason, logprobs: logprobs ? logprobsBody(kind, c.logprobs, 0) : null }
          : { index: c.index, text: c.text, finish_reason: c.finishReason, logprobs: logprobs ? logprobsBody(kind, c.logprobs, 0) : null },
      ),
      usage,
    };
  }
  const chunkObject = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> => ({ id, object: chunkObject, created, model, choices, ...extra });
  const first = kind === 'chat' ? of(chunk(runs.map((_, index) => ({ index, delta: { role: 'assistant', content: '' }, finish_reason: null, logprobs: null })))) : of();
  const offsets: number[] = [];
  const body$ = updates.pipe(
    map(({ choice, delta }) => {
      const offset = offsets[choice.index] ?? 0;
      offsets[choice.index] = offset + choice.logprobs.reduce((sum, t) => sum + t.text.length, 0);
      const lp = logprobs ? logprobsBody(kind, choice.logprobs, offset) : null;
      return chunk([
        kind === 'chat'
          ? { index: choice.index, delta: delta === '' && choice.finishReason !== null ? {} : { content: delta }, finish_reason: choice.finishReason, logprobs: lp }
          : { index: choice.index, text: delta, finish_reason: choice.finishReason, logprobs: lp },
      ]);
    }),
  );
  const tail = defer(() => (includeUsage ? of(chunk([], { usage })) : of()));
  await sendEvents(request, reply, concat(first, body$, tail), { done: true, error: (error) => openAiErrorBody(error) });
  return reply;
}
