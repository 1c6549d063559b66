/** Reads typed fields of a Hugging Face config.json, failing with the field's name and what was expected. */
import { ChorusError, describe } from '../errors.ts';
import type { ModelConfig } from './checkpoint.ts';

/** A positive integer field; `fallback` when absent (an error when there is none). */
export function positiveInt(config: ModelConfig, key: string, fallback?: number): number {
  const value = config[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw new ChorusError('CHORUS_FILE_INVALID', `config.json: ${key} must be a positive integer, got ${describe(value)}`, { param: key, value });
  }
  return value;
}

/** A positive number field; `fallback` when absent. */
export function positiveNumber(config: ModelConfig, key: string, fallback?: number): number {
  const value = config[key] ?? fallback;
  if (typeof value !== 'number' || !(value > 0)) {
    throw new ChorusError('CHORUS_FILE_INVALID', `config.json: ${key} must be a positive number, got ${describe(value)}`, { param: key, value });
  }
  return value;
}

/** A boolean field; `fallback` when absent. */
export function bool(config: ModelConfig, key: string, fallback: boolean): boolean {
  const value = config[key] ?? fallback;
  if (typeof value !== 'boolean') throw new ChorusError('CHORUS_FILE_INVALID', `config.json: ${key} must be true or false, got ${describe(value)}`, { param: key, value });
  return value;
}

/** Fails unless `config[key]` is absent or one of `allowed`. */
export function oneOf(config: ModelConfig, key: string, allowed: readonly unknown[]): void {
  const value = config[key];
  if (value !== undefined && !allowed.includes(value)) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: ${key} ${describe(value)} is not supported; expected ${allowed.map((a) => describe(a)).join(' or ')}`, {
      param: key,
      value,
    });
  }
}
