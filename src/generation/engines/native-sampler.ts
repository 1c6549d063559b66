/** Sampler rows (sequence.ts) packed into the flat arrays the native engine's kernels read. */
import { MAX_TOP_LOGPROBS, SAMPLE_PARAM_COUNT, type NativeSampleBatch, type NativeSampled } from '../../native/index.ts';
import type { SamplerRow } from '../core/sampler.ts';

/** The rows of a step that sample where the logits are: each batch row with its sampler row. */
export function packSamplerRows(entries: ReadonlyArray<{ row: number; sampler: SamplerRow }>): NativeSampleBatch {
  const n = entries.length;
  const params = new Float64Array(n * SAMPLE_PARAM_COUNT);
  const rows = new Int32Array(n);
  const seenOffsets = new Int32Array(n + 1);
  const banOffsets = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) {
    const { row, sampler: s } = entries[i]!;
    rows[i] = row;
    const at = i * SAMPLE_PARAM_COUNT;
    params[at] = s.temperature;
    params[at + 1] = s.topP;
    params[at + 2] = s.repetition;
    params[at + 3] = s.presence;
    params[at + 4] = s.frequency;
    params[at + 5] = s.uniform;
    params[at + 6] = s.topK;
    params[at + 7] = s.topLogProbs;
    params[at + 8] = s.beamKeep;
    params[at + 9] = s.beamScore;
    seenOffsets[i + 1] = seenOffsets[i]! + s.seen.length / 2;
    banOffsets[i + 1] = banOffsets[i]! + s.bans.length;
  }
  const seen = new Int32Array(2 * seenOffsets[n]!);
  const bans = new Int32Array(banOffsets[n]!);
  for (let i = 0; i < n; i++) {
    const s = entries[i]!.sampler;
    seen.set(s.seen, 2 * seenOffsets[i]!);
    bans.set(s.bans, banOffsets[i]!);
  }
  return { rows, params, seenOffsets, seen, banOffsets, bans };
}

/** The most likely ids of the sampler's `at`-th row, when the row asked for them (a beam's continuations). */
export function sampledTop(sampled: NativeSampled, at: number): Array<{ token: number; logProb: number }> {
  const count = sampled.topCounts[at]!;
  const top = new Array<{ token: number; logProb: number }>(count);
  for (let j = 0; j < count; j++) top[j] = { token: sampled.topTokens[at * MAX_TOP_LOGPROBS + j]!, logProb: sampled.topLogProbs[at * MAX_TOP_LOGPROBS + j]! };
  return top;
}

/** The sampler's choice for its `at`-th row, with the most likely ids when the row asked for them. */
export function sampledChoice(sampled: NativeSampled, at: number): { choice: { token: number; logProb: number }; top: Array<{ token: number; logProb: number }> } {
  return { choice: { token: sampled.tokens[at]!, logProb: sampled.logProbs[at]! }, top: sampledTop(sampled, at) };
}
