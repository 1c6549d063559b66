/**
 * The request fields every text route shares, as typebox schemas that fastify's own validation runs
 * before a handler. Each schema says in `expected` what a valid value is; a failing field is answered
 * `<field> must be <expected>, got <value>` (validation.ts).
 *
 * Bounds follow OpenAI and vLLM: presence and frequency penalties in [-2, 2], repetition_penalty in
 * (0, 2], top_p in (0, 1], top_logprobs at most 20, max_tokens at least 1. temperature is in [0, 2] on
 * the OpenAI routes (OpenAI's bound); the generate extension and KServe take any temperature >= 0, as
 * vLLM's sampling parameters and Triton's backends do.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { invalidArgument } from '../../errors.ts';
import type { TextRequest } from '../../serving/index.ts';

/** What a valid value is, in words, for error messages. */
export interface Described {
  expected: string;
}

export const integer = (minimum: number, maximum: number | undefined, expected: string) =>
  Type.Integer({ minimum, ...(maximum === undefined ? {} : { maximum }), expected });
export const number = (expected: string, bounds: { minimum?: number; maximum?: number; exclusiveMinimum?: number } = {}) => Type.Number({ ...bounds, expected });

/** A field that may be left out or sent as null (OpenAI clients send null for "unset"). */
export function nullable<T extends TSchema>(schema: T) {
  return Type.Optional(Type.Union([schema, Type.Null()], { expected: (schema as TSchema & Partial<Described>).expected }));
}

const stopString = Type.String({ minLength: 1, expected: 'a non-empty string' });

/** The sampling fields, `temperature` up to `maxTemperature` when given. */
export function samplingFields(maxTemperature?: number) {
  return {
    max_tokens: nullable(integer(1, undefined, 'an integer >= 1')),
    temperature: nullable(number(maxTemperature === undefined ? 'a number >= 0' : `a number in [0, ${maxTemperature}]`, { minimum: 0, ...(maxTemperature === undefined ? {} : { maximum: maxTemperature }) })),
    top_p: nullable(number('a number in (0, 1]', { exclusiveMinimum: 0, maximum: 1 })),
    top_k: nullable(integer(-1, undefined, 'an integer >= -1 (0 or -1: no top-k)')),
    seed: nullable(integer(0, Number.MAX_SAFE_INTEGER, 'an integer in [0, 2^53 - 1]')),
    stop: nullable(Type.Union([stopString, Type.Array(stopString)], { expected: 'a non-empty string or a list of them' })),
    presence_penalty: nullable(number('a number in [-2, 2]', { minimum: -2, maximum: 2 })),
    frequency_penalty: nullable(number('a number in [-2, 2]', { minimum: -2, maximum: 2 })),
    repetition_penalty: nullable(number('a number in (0, 2]', { exclusiveMinimum: 0, maximum: 2 })),
    min_tokens: nullable(integer(0, undefined, 'an integer >= 0')),
    beam_width: nullable(integer(1, 64, 'an integer in [1, 64]')),
    len_penalty: nullable(number('a number')),
  };
}

/** The sampling field names, in the order of samplingFields. */
export const SAMPLING_FIELDS = Object.keys(samplingFields()) as Array<keyof ReturnType<typeof samplingFields>>;

/**
 * The body's sampling fields as a text request's (nulls dropped; top_k -1, vLLM's "off", is 0), with
 * what no schema of one field can say: min_tokens at most max_tokens.
 */
export function samplingOf(body: Record<string, unknown>): TextRequest {
  const request: TextRequest = {};
  for (const field of SAMPLING_FIELDS) {
    const value = body[field];
    if (value !== undefined && value !== null) (request as Record<string, unknown>)[field] = value;
  }
  if (request.top_k === -1) request.top_k = 0;
  const { min_tokens: least, max_tokens: most } = request;
  if (typeof least === 'number' && typeof most === 'number' && least > most) throw invalidArgument('min_tokens', `at most max_tokens (${most})`, least);
  return request;
}
