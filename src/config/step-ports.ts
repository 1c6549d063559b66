/**
 * The ports each built-in step kind offers, with their datatypes: what ensemble validation checks wiring
 * against. Names and datatypes follow the FasterTransformer backend's tensors. `forward` and `script`
 * steps take any ports (the model or module decides).
 */
import type { Datatype } from './datatypes.ts';
import type { StepKind } from './schemas.ts';

/** One port of a step kind. */
export interface PortSpec {
  datatype: Datatype;
  /** A step cannot run without it. */
  required?: boolean;
  /**
   * Other datatypes the port's tensor may be declared or wired as, its values the same (token ids and
   * lengths: FT sends them UINT32 and returns them INT32). Default: none.
   */
  accepts?: readonly Datatype[];
}

/** Whether a tensor of `a` may flow where `b` is expected (or the other way): same, or one accepts the other. */
export function compatible(a: PortSpec, b: PortSpec): boolean {
  return a.datatype === b.datatype || (a.accepts ?? []).includes(b.datatype) || (b.accepts ?? []).includes(a.datatype);
}

/** The ports of a step kind: `undefined` where any names are accepted. */
export interface StepPorts {
  inputs: Record<string, PortSpec> | undefined;
  outputs: Record<string, PortSpec> | undefined;
}

const u32 = { datatype: 'UINT32' } as const;
const f32 = { datatype: 'FP32' } as const;
const i32 = { datatype: 'INT32' } as const;
/** Token ids and lengths: UINT32 in, INT32 out, either taken. */
const ids32 = { datatype: 'UINT32', accepts: ['INT32'] } as const;
const idsOut = { datatype: 'INT32', accepts: ['UINT32'] } as const;

/** FasterTransformer's decoding inputs (all optional, per request). */
const DECODING_INPUTS: Record<string, PortSpec> = {
  bad_words_list: i32,
  stop_words_list: i32,
  runtime_top_k: u32,
  runtime_top_p: f32,
  temperature: f32,
  len_penalty: f32,
  repetition_penalty: f32,
  presence_penalty: f32,
  frequency_penalty: f32,
  min_length: u32,
  beam_width: u32,
  beam_search_diversity_rate: f32,
  random_seed: { datatype: 'UINT64' },
  is_return_log_probs: { datatype: 'BOOL' },
  start_id: u32,
  end_id: u32,
  top_p_decay: f32,
  top_p_min: f32,
  top_p_reset_ids: u32,
  num_return_sequences: u32,
  top_logprobs: u32,
};

export const STEP_PORTS: Record<StepKind, StepPorts> = {
  tokenize: {
    inputs: { text: { datatype: 'BYTES', required: true }, bad_words: { datatype: 'BYTES' }, stop_words: { datatype: 'BYTES' }, add_special_tokens: { datatype: 'BOOL' } },
    outputs: { input_ids: u32, input_lengths: u32, bad_words_list: i32, stop_words_list: i32 },
  },
  generate: {
    inputs: {
      input_ids: { ...u32, required: true },
      input_lengths: { ...u32, required: true },
      request_output_len: { ...u32, required: true },
      ...DECODING_INPUTS,
    },
    outputs: { output_ids: idsOut, sequence_length: idsOut, cum_log_probs: f32, output_log_probs: f32, finish_reason: { datatype: 'BYTES' }, top_log_probs: f32, top_log_prob_ids: u32 },
  },
  encode: {
    inputs: { input_ids: { ...u32, required: true }, input_lengths: { ...u32, required: true }, is_return_attentions: { datatype: 'BOOL' } },
    outputs: { last_hidden_state: f32, attentions: f32 },
  },
  detokenize: {
    inputs: { output_ids: { ...ids32, required: true }, sequence_length: ids32, input_lengths: ids32 },
    outputs: { text: { datatype: 'BYTES' } },
  },
  forward: { inputs: undefined, outputs: undefined },
  script: { inputs: undefined, outputs: undefined },
};
