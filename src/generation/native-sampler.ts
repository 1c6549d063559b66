/** Sampler rows (sequence.ts) packed into the flat arrays the native engine's kernels read. */
import { SAMPLE_PARAM_COUNT, type NativeSampleBatch } from '../native/index.ts';
import type { SamplerRow } from './sequence.ts';

/** The rows of a step that sample where the logits are: each batch row with its sampler row. */
export function packSamplerRows(entries: ReadonlyArray<{ row: number; sampler: SamplerRow }>): NativeSampleBatch {
  const n = entries.length;
  const params = new Float64Array(n * SAMPLE_PARAM_COUNT);
  const seenOffsets = new Int32Array(n + 1);
  const banOffsets = new Int32Array(n + 1);
  const seen: number[] = [];
  const bans: number[] = [];
  entries.forEach(({ sampler: s }, i) => {
    params.set([s.temperature, s.topP, s.repetition, s.presence, s.frequency, s.uniform, s.topK], i * SAMPLE_PARAM_COUNT);
    for (const [id, count] of s.seen) seen.push(id, count);
    bans.push(...s.bans);
    seenOffsets[i + 1] = seen.length / 2;
    banOffsets[i + 1] = bans.length;
  });
  return { rows: Int32Array.from(entries, (e) => e.row), params, seenOffsets, seen: Int32Array.from(seen), banOffsets, bans: Int32Array.from(bans) };
}
