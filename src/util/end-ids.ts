/**
 * The ids a model's generation ends at. transformers reads `eos_token_id` from the model's
 * generation_config.json when there is one (its GenerationConfig then replaces the one it would make from
 * config.json), else from config.json; either file may give one id or a list of them (Llama 3.1
 * Instruct lists 128001, 128008 and 128009; Phi-3 and Gemma 2 list theirs only in
 * generation_config.json), and generate() stops a sequence at whichever comes first. Here a
 * generation_config.json without `eos_token_id` leaves config.json's in force.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError, describe } from '../errors.ts';

/** `eos_token_id` of one file as a list of ids (none for null); undefined when the file does not give it. */
function idsOf(file: string, value: unknown): number[] | undefined {
  if (value === undefined) return undefined;
  if (value === null) return [];
  const list = Array.isArray(value) ? (value as unknown[]) : [value];
  for (const id of list) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${file}: eos_token_id must be a non-negative integer or a list of them, got ${describe(value)}`, { param: 'eos_token_id', value });
    }
  }
  return [...new Set(list as number[])];
}

/**
 * The end ids of a model whose config.json is `config` and generation_config.json `generation`
 * (undefined: none): the generation config's `eos_token_id` when it has one, else config.json's; in
 * their order, each once. Empty when neither gives any. With `vocabSize`, ids past the vocabulary (a
 * tokenizer's, which the model can never choose) are left out.
 */
export function endIdsOf(config: Record<string, unknown>, generation?: Record<string, unknown>, vocabSize = Infinity): number[] {
  const ids = idsOf('generation_config.json', generation?.eos_token_id) ?? idsOf('config.json', config.eos_token_id) ?? [];
  return ids.filter((id) => id < vocabSize);
}

/** A model definition's `end_ids` checked against the model's vocabulary: each once, in order. */
export function checkedEndIds(ids: readonly number[], vocabSize: number): number[] {
  const bad = ids.find((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
  if (ids.length === 0 || bad !== undefined) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `end_ids must be a non-empty list of ids below the vocabulary's ${vocabSize}, got ${describe(ids)}`, { param: 'end_ids', value: ids });
  }
  return [...new Set(ids)];
}

/** The generation_config.json in `dir`, or undefined when there is none. */
export function readGenerationConfig(dir: string): Record<string, unknown> | undefined {
  const file = join(dir, 'generation_config.json');
  if (!existsSync(file)) return undefined;
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as unknown;
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${file} must hold a JSON object, got ${describe(parsed)}`);
  }
  return parsed as Record<string, unknown>;
}
