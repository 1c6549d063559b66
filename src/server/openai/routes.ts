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
import { filter, map, merge, tap, type Observable } from 'rxjs';
import { ChorusError } from '../../errors.ts';
import type { EngineClient, PipelineUpdate, TokenLogProb } from '../../serving/index.ts';
import { cancelOnClose, sendEvents } from '../disconnect.ts';
import { openAiErrorBody } from '../errors.ts';
import { ChatBody, CompletionBody } from '../schemas/openai.ts';
import { openAiRuns, type OpenAiKind } from './request.ts';

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
  // random_weights: the pipeline runs a model on seeded random weights (its text is noise).
  const describe = (id: string): Record<string, unknown> => ({ id, object: 'model', created: 0, owned_by: 'chorus', random_weights: client.randomWeights(id) });
  app.get('/v1/models', async () => ({ object: 'list', data: client.models('pipeline').map((m) => describe(m.name)) }));
  app.get<{ Params: { model: string } }>('/v1/models/:model', async (request) => describe(pipelineOf(client, request.params.model)));
  app.post<{ Body: CompletionBody }>('/v1/completions', { schema: { body: CompletionBody } }, async (request, reply) => handle(client, request, reply, 'completion'));
  app.post<{ Body: ChatBody }>('/v1/chat/completions', { schema: { body: ChatBody } }, async (request, reply) => handle(client, request, reply, 'chat'));
}

/** The pipeline a model name names, or OpenAI's 404. */
function pipelineOf(client: EngineClient, model: string): string {
  try {
    return client.resolve(model, ['pipeline']).name;
  } catch (error) {
    if (!(error instanceof ChorusError) || error.code !== 'CHORUS_NOT_FOUND') throw error;
    const pipelines = client.models('pipeline').map((m) => m.name);
    throw new ChorusError('CHORUS_NOT_FOUND', `The model \`${model}\` does not exist; models: ${pipelines.join(', ')}`, { param: 'model', value: model });
  }
}

function finishReason(reason: string | undefined): string | null {
  if (reason === undefined) return null;
  return reason === 'length' ? 'length' : 'stop';
}

async function handle(client: EngineClient, request: FastifyRequest<{ Body: ChatBody | CompletionBody }>, reply: FastifyReply, kind: OpenAiKind): Promise<unknown> {
  const { runs, n, stream, includeUsage, logprobs } = openAiRuns(kind, request.body);
  const model = pipelineOf(client, request.body.model);
  const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const countUsage = (u: PipelineUpdate, runIndex: number): void => {
    if (u.usage === undefined) return;
    if (runIndex % n === 0) usage.prompt_tokens += u.usage.promptTokens;
    usage.completion_tokens += u.usage.completionTokens;
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  };
  // Each run's updates of its first choice, renumbered into the response's.
  const streams = runs.map((run, r) =>
    client.generate(model, run).pipe(
      map((u) => {
        countUsage(u, r);
        const c = u.choices[0]?.index === 0 ? u.choices[0] : u.choices.find((c) => c.index === 0);
        return c === undefined ? undefined : { choice: { index: r, text: c.text, finishReason: finishReason(c.finishReason), logprobs: c.logprobs ?? [] }, delta: c.delta };
      }),
      filter((u) => u !== undefined),
    ),
  );
  const updates: Observable<{ choice: Choice; delta: string }> = streams.length === 1 ? streams[0]! : merge(...streams);
  const object = kind === 'chat' ? 'chat.completion' : 'text_completion';
  if (!stream) {
    const choices: Choice[] = runs.map((_, index) => ({ index, text: '', finishReason: null, logprobs: [] }));
    await cancelOnClose(
      request,
      reply,
      updates.pipe(
        tap(({ choice }) => {
          const held = choices[choice.index]!;
          held.text = choice.text;
          held.finishReason = choice.finishReason;
          for (const t of choice.logprobs) held.logprobs.push(t);
        }),
      ),
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
  // Every chunk is this envelope around its choices (and extra fields): its JSON up to `"choices":[`, once.
  const head = JSON.stringify({ id, object: chunkObject, created, model, choices: [] }).slice(0, -2);
  const chunk = (choicesJson: string, extra = ''): string => `${head}${choicesJson}]${extra}}`;
  const first = kind === 'chat' ? chunk(runs.map((_, index) => JSON.stringify({ index, delta: { role: 'assistant', content: '' }, finish_reason: null, logprobs: null })).join(',')) : undefined;
  const offsets: number[] = [];
  const events = updates.pipe(
    map(({ choice, delta }) => {
      // A token's chunk, the most of them, written as the object below would be.
      if (!logprobs && choice.finishReason === null) {
        return chunk(`{"index":${choice.index},${kind === 'chat' ? `"delta":{"content":${JSON.stringify(delta)}}` : `"text":${JSON.stringify(delta)}`},"finish_reason":null,"logprobs":null}`);
      }
      let lp: unknown = null;
      if (logprobs) {
        const offset = offsets[choice.index] ?? 0;
        offsets[choice.index] = offset + choice.logprobs.reduce((sum, t) => sum + t.text.length, 0);
        lp = logprobsBody(kind, choice.logprobs, offset);
      }
      return chunk(
        JSON.stringify(
          kind === 'chat'
            ? { index: choice.index, delta: delta === '' && choice.finishReason !== null ? {} : { content: delta }, finish_reason: choice.finishReason, logprobs: lp }
            : { index: choice.index, text: delta, finish_reason: choice.finishReason, logprobs: lp },
        ),
      );
    }),
  );
  // The role chunk goes out with the first update, so that a request refused before any (a max_tokens
  // that cannot fit) is answered with its error status rather than a 200.
  const last = (): string | undefined => (includeUsage ? chunk('', `,"usage":${JSON.stringify(usage)}`) : undefined);
  await sendEvents(request, reply, events, { done: true, first, last, error: (error) => openAiErrorBody(error) });
  return reply;
}
