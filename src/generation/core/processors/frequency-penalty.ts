/** Frequency penalty (additive, OpenAI semantics): subtracted once per occurrence of an id in the output. */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor for a finite `penalty`; undefined for 0. */
export function frequencyPenalty(penalty: number): LogitsProcessor | undefined {
  if (!Number.isFinite(penalty)) throw invalidArgument('frequency_penalty', 'a finite number', penalty);
  if (penalty === 0) return undefined;
  return (logits, state) => {
    const out = Float32Array.from(logits);
    for (const [id, count] of state.outputCounts) out[id]! -= penalty * count;
    return out;
  };
}
