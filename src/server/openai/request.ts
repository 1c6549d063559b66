/**
 * A validated OpenAI body as the text requests it runs: one per prompt and sample (`n` samples of each
 * prompt; with a seed, seeds seed, seed+1, ...; without, each its own random seed, as OpenAI's n does),
 * with the sampling fields mapped onto the pipeline's names. What the schema cannot say is checked
 * here: fields Chorus cannot honour are refused by name, and top_logprobs needs logprobs.
 */
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { TextRequest } from '../../serving/index.ts';
import { samplingOf } from '../schemas/fields.ts';
import type { ChatBody, CompletionBody } from '../schemas/openai.ts';

export type OpenAiKind = 'chat' | 'completion';

export interface OpenAiRuns {
  model: string;
  runs: TextRequest[];
  /** Samples per prompt. */
  n: number;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
}

/** The most completions (prompts times n) one request may ask for: the engines' default waiting queue. */
export const MAX_COMPLETIONS = 1024;

const REFUSED: Record<string, (value: unknown) => boolean> = {
  echo: (v) => v === true,
  logit_bias: (v) => v !== undefined && v !== null && (typeof v !== 'object' || Object.keys(v as object).length > 0),
  suffix: (v) => v !== undefined && v !== null && v !== '',
  best_of: (v) => v !== undefined && v !== null && v !== 1,
  tools: (v) => Array.isArray(v) && v.length > 0,
};

export function openAiRuns(kind: OpenAiKind, body: ChatBody | CompletionBody): OpenAiRuns {
  for (const [field, isUsed] of Object.entries(REFUSED)) {
    if (isUsed((body as Record<string, unknown>)[field])) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${field} is not supported by this server`, { param: field });
  }
  const n = body.n ?? 1;
  const stream = body.stream ?? false;
  if (body.stream_options !== undefined && body.stream_options !== null && !stream) throw invalidArgument('stream_options', 'given only with stream: true', body.stream_options);
  const base: TextRequest = { ...samplingOf({ ...body, ...(body.max_completion_tokens === undefined || body.max_completion_tokens === null ? {} : { max_tokens: body.max_completion_tokens }) }), stream };
  let logprobs: boolean;
  let prompts: TextRequest[];
  if (kind === 'chat') {
    const chat = body as ChatBody;
    logprobs = chat.logprobs === true;
    const top = chat.top_logprobs ?? 0;
    if (top > 0 && !logprobs) throw invalidArgument('top_logprobs', 'used with logprobs: true', top);
    if (top > 0) base.top_logprobs = top;
    const messages = chat.messages.map((message, i) => {
      const content = Array.isArray(message.content)
        ? message.content
            .map((part, j) => {
              if (part.type !== 'text' || typeof part.text !== 'string') throw invalidArgument(`messages[${i}].content[${j}]`, 'a text part {type: "text", text}', part);
              return part.text;
            })
            .join('')
        : message.content;
      return { role: message.role, content };
    });
    prompts = [{ ...base, messages }];
  } else {
    const completion = body as CompletionBody;
    const top = completion.logprobs ?? null;
    logprobs = top !== null;
    if (top !== null && top > 0) base.top_logprobs = top;
    prompts = (typeof completion.prompt === 'string' ? [completion.prompt] : completion.prompt).map((text) => ({ ...base, text_input: text }));
  }
  if (logprobs) for (const p of prompts) p.logprobs = true;
  if (prompts.length * n > MAX_COMPLETIONS) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${prompts.length} prompts times n ${n} make ${prompts.length * n} completions; a request makes at most ${MAX_COMPLETIONS}`, { param: prompts.length > 1 ? 'prompt' : 'n' });
  }
  const runs = prompts.flatMap((p) => Array.from({ length: n }, (_, i) => (n === 1 ? p : { ...p, seed: nthSeed(p.seed, i) })));
  return { model: body.model, runs, n, stream, includeUsage: body.stream_options?.include_usage === true, logprobs };
}

/** Seed `seed` + i of n samples (a bigint past 2^53 - 1, which the seed field takes exactly), or a random one. */
function nthSeed(seed: TextRequest['seed'], i: number): number | bigint {
  if (typeof seed === 'bigint') return seed + BigInt(i);
  if (typeof seed !== 'number') return Math.floor(Math.random() * 2 ** 31);
  return Number.isSafeInteger(seed + i) ? seed + i : BigInt(seed) + BigInt(i);
}
