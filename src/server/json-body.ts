/**
 * Request bodies as JSON: exact 64-bit integers (FT's uint64 seeds), and nesting bounded, so that no
 * code after the parse (a schema's check, an error's rendering, a tensor's flattening) meets a value
 * nested past what it can walk.
 */
import { ChorusError } from '../errors.ts';
import { nestsDeeperThan, parseExactJson } from '../util/exact-json.ts';

/** How deeply a JSON body may nest arrays and objects (a KServe tensor's data nests as deep as its rank). */
export const MAX_JSON_DEPTH = 64;

/** `text` as JSON, or a CHORUS_INVALID_ARGUMENT naming `what` (the body, or a binary body's JSON header). */
export function parseJsonBody(text: string, what = 'body'): unknown {
  let value: unknown;
  try {
    value = parseExactJson(text);
  } catch (error) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${what} must be valid JSON: ${(error as Error).message}`, { param: 'body' });
  }
  if (nestsDeeperThan(value, MAX_JSON_DEPTH)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${what} must nest arrays and objects at most ${MAX_JSON_DEPTH} deep`, { param: 'body' });
  return value;
}
