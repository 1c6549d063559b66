/** Beam search is not in the engines yet: its parameters are refused rather than ignored. */
import { ChorusError } from '../errors.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';

export function refuseBeamSearch(params: ResolvedSamplingParams): void {
  const beamOnly: Array<[keyof ResolvedSamplingParams, unknown]> = [
    ['beam_width', 1],
    ['num_return_sequences', 1],
    ['len_penalty', 1],
    ['beam_search_diversity_rate', 0],
  ];
  for (const [field, neutral] of beamOnly) {
    if (params[field] !== neutral) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `${field} ${String(params[field])} needs beam search, which this engine does not have yet; leave it at ${String(neutral)}`, { param: field });
    }
  }
}
