/**
 * Per-request decoding parameters: FasterTransformer's decoding inputs under their FT names, validated
 * in one place. Every field is optional; `validateSamplingParams` fills defaults and throws a
 * CHORUS_INVALID_ARGUMENT naming the field and its allowed range for a bad value.
 */
import { invalidArgument } from '../../errors.ts';

/** What a request may set. */
export interface SamplingParams {
  /** Tokens to generate at most (FT's request_output_len). Default: 16. */
  request_output_len?: number;
  /** Keep the k most likely tokens; 0 disables. Default: 0. */
  runtime_top_k?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p, in (0, 1]. Default: 1. */
  runtime_top_p?: number;
  /** Divides logits; 0 means greedy. Default: 1. */
  temperature?: number;
  /** Multiplicative penalty on tokens of the prompt and output, > 0 (1 is none; HF/FT semantics). Default: 1. */
  repetition_penalty?: number;
  /** Subtracted once from the logit of every token already generated. Default: 0. */
  presence_penalty?: number;
  /** Subtracted from a token's logit once per time it was generated. Default: 0. */
  frequency_penalty?: number;
  /** The end id cannot be generated before this many tokens. Default: 0. */
  min_length?: number;
  /** Beams; 1 samples or decodes greedily. Default: 1. */
  beam_width?: number;
  /** Beam score = log-prob / length^len_penalty. Default: 1. */
  len_penalty?: number;
  /** Subtracted per sibling rank in diverse beam search (arXiv 1611.08562), >= 0. Default: 0. */
  beam_search_diversity_rate?: number;
  /**
   * Seeds this request's own random stream: an integer in [0, 2^64 - 1] (FT's uint64), a bigint beyond
   * 2^53. Default: 0.
   */
  random_seed?: number | bigint;
  /** Return the log-probability of each generated token and their sum. Default: false. */
  is_return_log_probs?: boolean;
  /** With each token, the k most likely tokens of its step and their log-probabilities, k in [0, 20]. Default: 0. */
  top_logprobs?: number;
  /** The id generation stops at, in place of the model's end ids. Default: the model's (generation_config.json's eos_token_id, else config.json's; any of them). */
  end_id?: number;
  /**
   * FT's start_id: what a decoder-only request with an empty prompt starts from, and an
   * encoder-decoder's first decoder token. Default: the model's bos_token_id / decoder_start_token_id.
   */
  start_id?: number;
  /** Factual-nucleus sampling: top_p is multiplied by this after each token, in (0, 1]. Default: 1 (off). */
  top_p_decay?: number;
  /** ...but not below this, in (0, 1]. Default: 1e-6. */
  top_p_min?: number;
  /** ...and reset to runtime_top_p after generating one of these ids. Default: none. */
  top_p_reset_ids?: number[];
  /** Phrases (token id sequences) that must not be generated. Default: none. */
  bad_words?: number[][];
  /** Token id sequences that end generation when the output ends with one (finish reason `stop`). Default: none. */
  stop_words?: number[][];
  /** Sequences to return (at most beam_width with beam search). Default: 1. */
  num_return_sequences?: number;
  /**
   * Beam search's stopping rule (transformers' semantics): false stops when no beam can beat the
   * finished ones at the current length, true as soon as beam_width are finished, 'never' only when
   * none could at the best length the penalty allows. Default: false.
   */
  early_stopping?: boolean | 'never';
}

/** Parameters with every default filled in. */
export type ResolvedSamplingParams = Required<Omit<SamplingParams, 'end_id' | 'start_id'>> & { end_id: number | undefined; start_id: number | undefined };

/** Checks every field against its range and fills the defaults; `vocabSize` bounds the id fields. */
export function validateSamplingParams(params: SamplingParams, vocabSize: number): ResolvedSamplingParams {
  const int = (field: keyof SamplingParams, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const value = params[field] ?? fallback;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw invalidArgument(field, `an integer in [${min}, ${max === Number.MAX_SAFE_INTEGER ? '2^53' : max}]`, value);
    }
    return value;
  };
  const num = (field: keyof SamplingParams, fallback: number, ok: (v: number) => boolean, range: string): number => {
    const value = params[field] ?? fallback;
    if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value)) throw invalidArgument(field, `a number in ${range}`, value);
    return value;
  };
  const id = (field: string, value: unknown): number => {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value >= vocabSize) {
      throw invalidArgument(field, `a token id, an integer in [0, ${vocabSize - 1}]`, value);
    }
    return value;
  };
  const phrases = (field: 'bad_words' | 'stop_words'): number[][] =>
    (params[field] ?? []).map((phrase, i) => {
      if (!Array.isArray(phrase) || phrase.length === 0) throw invalidArgument(`${field}[${i}]`, 'a non-empty list of token ids', phrase);
      return phrase.map((v, j) => id(`${field}[${i}][${j}]`, v));
    });
  const beamWidth = int('beam_width', 1, 1, 64);
  // As many sequences as there are beams, at most.
  const returned = (beams: number): number => {
    const value = params.num_return_sequences ?? 1;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > beams) throw invalidArgument('num_return_sequences', `an integer in [1, ${beams}] (at most beam_width, ${beams})`, value);
    return value;
  };
  const resolved: ResolvedSamplingParams = {
    request_output_len: int('request_output_len', 16, 1),
    runtime_top_k: int('runtime_top_k', 0, 0, vocabSize),
    runtime_top_p: num('runtime_top_p', 1, (v) => v > 0 && v <= 1, '(0, 1]'),
    temperature: num('temperature', 1, (v) => v >= 0, '[0, inf)'),
    repetition_penalty: num('repetition_penalty', 1, (v) => v > 0, '(0, inf)'),
    presence_penalty: num('presence_penalty', 0, () => true, '(-inf, inf)'),
    frequency_penalty: num('frequency_penalty', 0, () => true, '(-inf, inf)'),
    min_length: int('min_length', 0, 0),
    beam_width: beamWidth,
    len_penalty: num('len_penalty', 1, () => true, '(-inf, inf)'),
    beam_search_diversity_rate: num('beam_search_diversity_rate', 0, (v) => v >= 0, '[0, inf)'),
    random_seed: seed(params.random_seed),
    is_return_log_probs: params.is_return_log_probs ?? false,
    top_logprobs: int('top_logprobs', 0, 0, 20),
    end_id: params.end_id === undefined ? undefined : id('end_id', params.end_id),
    start_id: params.start_id === undefined ? undefined : id('start_id', params.start_id),
    top_p_decay: num('top_p_decay', 1, (v) => v > 0 && v <= 1, '(0, 1]'),
    top_p_min: num('top_p_min', 1e-6, (v) => v > 0 && v <= 1, '(0, 1]'),
    top_p_reset_ids: (params.top_p_reset_ids ?? []).map((v, i) => id(`top_p_reset_ids[${i}]`, v)),
    bad_words: phrases('bad_words'),
    stop_words: phrases('stop_words'),
    num_return_sequences: returned(beamWidth),
    early_stopping: params.early_stopping ?? false,
  };
  if (typeof resolved.is_return_log_probs !== 'boolean') throw invalidArgument('is_return_log_probs', 'true or false', params.is_return_log_probs);
  if (typeof resolved.early_stopping !== 'boolean' && resolved.early_stopping !== 'never') throw invalidArgument('early_stopping', "true, false or 'never'", params.early_stopping);
  return resolved;
}

/** A uint64 seed, exact: a safe integer number or a bigint in [0, 2^64 - 1]. */
function seed(value: unknown): number | bigint {
  if (value === undefined) return 0;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  if (typeof value === 'bigint' && value >= 0n && value < 2n ** 64n) return value;
  throw invalidArgument('random_seed', 'an integer in [0, 2^64 - 1] (exact: beyond 2^53, a bigint)', value);
}

/**
 * Throws unless every prompt id is a token id of the model: `inputIds[i] must be a token id...`. An
 * empty prompt is allowed when `emptyAllowed` (a start id will stand in for it).
 */
export function validateInputIds(inputIds: readonly number[], vocabSize: number, emptyAllowed = false): void {
  if (inputIds.length === 0 && !emptyAllowed) throw invalidArgument('inputIds', 'at least one token id', inputIds);
  inputIds.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw invalidArgument(`inputIds[${i}]`, `a token id, an integer in [0, ${vocabSize - 1}]`, id);
  });
}
