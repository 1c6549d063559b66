/**
 * Choosing the next token from processed logits: the argmax (temperature 0), or a draw from their
 * softmax with the request's own seeded stream, so a seed gives the same tokens whatever else is batched.
 */
import { argmax, logSumExp } from '../util/argmax.ts';

/** The chosen id and its log-probability under the distribution it was chosen from. */
export interface Choice {
  token: number;
  logProb: number;
}

/** The largest logit's id (the first among equals). */
export function greedy(logits: Float32Array): Choice {
  const best = argmax(logits);
  return { token: best, logProb: logits[best]! - logSumExp(logits) };
}

/** A draw from softmax(logits) by inverting its cumulative distribution at `uniform` in (0, 1). */
export function sample(logits: Float32Array, uniform: number): Choice {
  const norm = logSumExp(logits);
  let cumulative = 0;
  let last = 0;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] === -Infinity) continue;
    last = i;
    cumulative += Math.exp(logits[i]! - norm);
    if (uniform < cumulative) return { token: i, logProb: logits[i]! - norm };
  }
  // Rounding left the total a hair under 1 and uniform above it: the last possible id.
  return { token: last, logProb: logits[last]! - norm };
}
