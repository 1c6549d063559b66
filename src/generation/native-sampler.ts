/** Sampler rows (sequence.ts) packed into the flat arrays the native engine's kernels read. */
import { SAMPLE_PARAM_COUNT, type NativeSampleBatch } from '../native/index.ts';
import type { SamplerRow } from './sequence.ts';

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
