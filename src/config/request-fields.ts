/**
 * The standard request fields of a model pipeline (the names of Triton's generate extension and OpenAI's
 * API) and the FasterTransformer generate input each fills, with its datatype: what a model pipeline
 * maps and what its definition's defaults may set.
 */
import type { Datatype } from './datatypes.ts';

/** Standard request fields of a model pipeline: field -> generate input (port) and its datatype. */
export const STANDARD_FIELDS: Record<string, [string, Datatype]> = {
  max_tokens: ['request_output_len', 'UINT32'],
  temperature: ['temperature', 'FP32'],
  top_p: ['runtime_top_p', 'FP32'],
  top_k: ['runtime_top_k', 'UINT32'],
  seed: ['random_seed', 'UINT64'],
  beam_width: ['beam_width', 'UINT32'],
  n: ['num_return_sequences', 'UINT32'],
  presence_penalty: ['presence_penalty', 'FP32'],
  frequency_penalty: ['frequency_penalty', 'FP32'],
  repetition_penalty: ['repetition_penalty', 'FP32'],
  min_tokens: ['min_length', 'UINT32'],
  len_penalty: ['len_penalty', 'FP32'],
  logprobs: ['is_return_log_probs', 'BOOL'],
  top_logprobs: ['top_logprobs', 'UINT32'],
  top_p_decay: ['top_p_decay', 'FP32'],
  top_p_min: ['top_p_min', 'FP32'],
  top_p_reset_ids: ['top_p_reset_ids', 'UINT32'],
};

/** Standard fields that take a list of values (the rest take one). */
export const LIST_FIELDS = new Set(['top_p_reset_ids']);
