/**
 * Repetition penalty (multiplicative, as transformers and FasterTransformer apply it): for every id in
 * the prompt or the output, a positive logit is divided by the penalty and a negative one multiplied.
 */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor for `penalty` > 0; undefined for 1 (no effect). */
export function repetitionPenalty(penalty: number): LogitsProcessor | undefined {
  if (!(Number.isFinite(penalty) && penalty > 0)) throw invalidArgument('repetition_penalty', 'a number in (0, inf)', penalty);
  if (penalty === 1) return undefined;
  return (logits, state) => {
    const out = Float32Array.from(logits);
    const seen = new Set([...state.promptIds, ...state.outputIds]);
    for (const id of seen) out[id] = out[id]! > 0 ? out[id]! / penalty : out[id]! * penalty;
    return out;
  };
}
