/** Presence penalty (additive, OpenAI semantics): subtracted once from every id the output contains. */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor for a finite `penalty`; undefined for 0. */
export function presencePenalty(penalty: number): LogitsProcessor | undefined {
  if (!Number.isFinite(penalty)) throw invalidArgument('presence_penalty', 'a finite number', penalty);
  if (penalty === 0) return undefined;
  return (logits, state) => {
    const out = Float32Array.from(logits);
    for (const id of state.outputCounts.keys()) out[id]! -= penalty;
    return out;
  };
}
