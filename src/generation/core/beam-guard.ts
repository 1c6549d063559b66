/**
 * Parameters that belong to one decoding mode are refused in the other, naming the field: an accepted
 * parameter that changes nothing would mislead. Sampling filters do nothing in beam search (it keeps
 * the best beams); beam parameters do nothing with one beam.
 */
import { ChorusError } from '../../errors.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';

function refuse(field: keyof ResolvedSamplingParams, value: unknown, why: string): never {
  throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${field} ${String(value)} ${why}`, { param: field });
}

export function checkDecodingMode(params: ResolvedSamplingParams): void {
  if (params.beam_width === 1) {
    if (params.len_penalty !== 1) refuse('len_penalty', params.len_penalty, 'ranks beams: it needs beam_width > 1; leave it at 1');
    if (params.beam_search_diversity_rate !== 0) refuse('beam_search_diversity_rate', params.beam_search_diversity_rate, 'spreads beams: it needs beam_width > 1; leave it at 0');
    if (params.early_stopping !== false) refuse('early_stopping', params.early_stopping, 'ends beam search: it needs beam_width > 1; leave it false');
    return;
  }
  const beams = `with beam_width ${params.beam_width} (beam search keeps the best beams; it does not sample)`;
  if (params.runtime_top_k > 1) refuse('runtime_top_k', params.runtime_top_k, `has no effect ${beams}; leave it at 0 or 1`);
  if (params.runtime_top_p < 1) refuse('runtime_top_p', params.runtime_top_p, `has no effect ${beams}; leave it at 1`);
  if (params.top_p_decay < 1) refuse('top_p_decay', params.top_p_decay, `has no effect ${beams}; leave it at 1`);
  if (params.top_logprobs > 0) refuse('top_logprobs', params.top_logprobs, `is not kept ${beams}; leave it at 0`);
  if (params.temperature === 0) refuse('temperature', params.temperature, `would ask for greedy decoding ${beams}; use a temperature > 0 (1 leaves the log-probs as they are)`);
}
