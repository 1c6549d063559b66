/** Minimum length: no end id can be generated until the output has `minLength` tokens. */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor; undefined when `minLength` is 0 or there is no end id. */
export function minLength(minLength: number, endIds: readonly number[]): LogitsProcessor | undefined {
  if (!Number.isInteger(minLength) || minLength < 0) throw invalidArgument('min_length', 'an integer in [0, 2^53]', minLength);
  if (minLength === 0 || endIds.length === 0) return undefined;
  return (logits, state) => {
    if (state.outputIds.length >= minLength) return logits;
    const out = Float32Array.from(logits);
    for (const id of endIds) out[id] = -Infinity;
    return out;
  };
}
