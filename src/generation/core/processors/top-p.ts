/**
 * Top-p (nucleus): keep the most likely ids, in order, until their probability reaches p (the id that
 * crosses p is kept, and always at least one); the rest become -inf. p is read from the sequence state,
 * so factual-nucleus sampling can lower it from step to step.
 */
import type { LogitsProcessor } from './processor.ts';

/** The processor; undefined when p is 1 and never decays. */
export function topP(initialTopP: number, decays: boolean): LogitsProcessor | undefined {
  if (initialTopP >= 1 && !decays) return undefined;
  return (logits, state) => {
    const p = state.topP;
    if (p >= 1) return logits;
    const order = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
    const max = logits[order[0]!]!;
    let total = 0;
    for (const value of logits) total += Math.exp(value - max);
    const out = new Float32Array(logits.length).fill(-Infinity);
    let cumulative = 0;
    for (const id of order) {
      out[id] = logits[id]!;
      cumulative += Math.exp(logits[id]! - max) / total;
      if (cumulative >= p) break;
    }
    return out;
  };
}

/** Factual-nucleus update after a token: p decays towards the minimum, and resets on a reset id. */
export function nextTopP(current: number, token: number, params: { runtime_top_p: number; top_p_decay: number; top_p_min: number; top_p_reset_ids: readonly number[] }): number {
  if (params.top_p_reset_ids.includes(token)) return params.runtime_top_p;
  return Math.max(params.top_p_min, current * params.top_p_decay);
}
