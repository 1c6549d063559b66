/**
 * The bodies of OpenAI's `/v1/completions` and `/v1/chat/completions`, as the routes validate them:
 * OpenAI's fields and bounds, plus the sampling fields vLLM adds (`top_k`, `repetition_penalty`,
 * `min_tokens`, `beam_width`). Any other field is refused by name, as OpenAI does. Fields Chorus cannot
 * honour (`echo`, `logit_bias`, `suffix`, `best_of`, `tools`) pass the schema and are refused when set.
 */
import { Type, type Static } from '@sinclair/typebox';
import { integer, nullable, samplingFields } from './fields.ts';

/** Checked as OpenAI types them, so that a client's "unset" value passes; refused by name when actually used. */
const refused = {
  echo: nullable(Type.Boolean({ expected: 'true or false (true is not supported)' })),
  logit_bias: nullable(Type.Record(Type.String(), Type.Number(), { expected: 'an object of token ids to numbers (not supported when not empty)' })),
  suffix: nullable(Type.String({ expected: 'a string (not supported when not empty)' })),
  best_of: nullable(integer(1, 20, 'an integer in [1, 20] (not supported above 1)')),
  tools: nullable(Type.Array(Type.Unknown(), { expected: 'a list of tools (not supported when not empty)' })),
};

const common = {
  model: Type.String({ minLength: 1, expected: 'the name of a model (a pipeline)' }),
  n: nullable(integer(1, 16, 'an integer in [1, 16]')),
  stream: nullable(Type.Boolean({ expected: 'true or false' })),
  stream_options: nullable(Type.Object({ include_usage: Type.Optional(Type.Boolean({ expected: 'true or false' })) }, { additionalProperties: false, expected: 'an object {include_usage}, with stream: true' })),
  user: nullable(Type.String({ expected: 'a string' })),
  max_completion_tokens: nullable(integer(1, undefined, 'an integer >= 1')),
  ...samplingFields(2),
  ...refused,
};

/** OpenAI's message roles; the chat template reads the role as given. */
export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

const textPart = Type.Object({ type: Type.String(), text: Type.Optional(Type.String()) }, { expected: 'a content part {type, ...}' });

export const ChatMessage = Type.Object(
  {
    role: Type.Union(ROLES.map((role) => Type.Literal(role)), { expected: `one of ${ROLES.join(', ')}` }),
    content: Type.Union([Type.String(), Type.Array(textPart)], { expected: 'a string or a list of text parts' }),
    name: Type.Optional(Type.String({ expected: 'a string' })),
  },
  { expected: 'an object with a role and content' },
);

export const ChatBody = Type.Object(
  {
    ...common,
    messages: Type.Array(ChatMessage, { minItems: 1, expected: 'a non-empty list of messages' }),
    logprobs: nullable(Type.Boolean({ expected: 'true or false' })),
    top_logprobs: nullable(integer(0, 20, 'an integer in [0, 20]')),
  },
  { additionalProperties: false, expected: 'a JSON object' },
);

export const CompletionBody = Type.Object(
  {
    ...common,
    prompt: Type.Union([Type.String(), Type.Array(Type.String(), { minItems: 1 })], { expected: 'a string or a non-empty list of strings' }),
    logprobs: nullable(integer(0, 5, 'an integer in [0, 5]')),
  },
  { additionalProperties: false, expected: 'a JSON object' },
);

export type ChatBody = Static<typeof ChatBody>;
export type CompletionBody = Static<typeof CompletionBody>;
