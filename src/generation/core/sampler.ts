/**
 * Choosing the next token from processed logits: the argmax (temperature 0), or a draw from their
 * softmax with the request's own seeded stream, so a seed gives the same tokens whatever else is batched.
 */
import { argmax, logSumExp } from '../../util/argmax.ts';

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

/**
 * One step of a sequence for a sampler that runs where the logits are (the native engine's kernels):
 * what its processors would do, as numbers. Defaults change nothing (temperature, top_p and repetition
 * 1, the rest 0); temperature 0 takes the argmax of the processed logits.
 */
export interface SamplerRow {
  temperature: number;
  /** The current p (factual-nucleus sampling lowers it step by step). */
  topP: number;
  topK: number;
  /** How many of the most likely ids to report with their log-probabilities (top_logprobs). */
  topLogProbs: number;
  repetition: number;
  presence: number;
  frequency: number;
  /** This step's draw from the request's stream (0 when greedy: none is drawn). */
  uniform: number;
  /** (id, count in the output) pairs of the ids the penalties touch, each id once (0: only in the context, for repetition). */
  seen: Int32Array;
  /** Ids it may not choose now: bad words' last ids, the end id before min_length. */
  bans: readonly number[];
  /** A beam of a beam search: how many continuations to return (0: choose a token), and its running score. */
  beamKeep: number;
  beamScore: number;
}
