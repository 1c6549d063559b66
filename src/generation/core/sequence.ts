/**
 * Requests inside an engine. `ActiveRequest` is what the engines and the scheduler see: rows of the
 * batch (one per live beam), their last tokens, and `step`, which turns those rows' logits into the
 * next tokens and says which row each next row continues. `Sequence` samples or decodes greedily (one
 * row, tokens streamed as they come); `BeamSequence` (beam-sequence.ts) runs beam search.
 */
import type { Subscriber } from 'rxjs';
import { logSumExp, topIndices } from '../../util/argmax.ts';
import { uniformStream } from '../../util/random.ts';
import type { FinishReason, RequestMetrics, TokenEvent } from './engine.ts';
import { bannedAfter, logitsProcessors, nextTopP, processLogits, type LogitsProcessor } from './processors/index.ts';
import { greedy, sample, type SamplerRow } from './sampler.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';
import type { Schedulable } from './scheduler.ts';

/** What a request needs of its model. */
export interface ModelIds {
  vocabSize: number;
  /** The ids generation ends at (any of them, whichever comes first); empty: none. */
  endIds: readonly number[];
  /** What an empty prompt of a decoder-only model starts from, unless the request's start_id says otherwise. */
  bosId?: number;
  /** transformers' forced_bos_token_id: the only choice for the first token. */
  forcedBos?: number;
  /** transformers' forced_eos_token_id: the only choice for the last token the length allows. */
  forcedEos?: number;
  /**
   * An encoder-decoder's decoder_start_token_id: the decoder's own prompt, which is what the penalties
   * see as already there (the encoder's input is not), as in transformers.
   */
  decoderStart?: number;
}

export abstract class ActiveRequest implements Schedulable {
  cancelled = false;
  finished = false;
  readonly submittedAt = performance.now();
  admittedAt: number | undefined;
  readonly tokenTimes: number[] = [];
  finishReason: FinishReason | undefined;
  reported = false;
  /** The ids it ends at: the request's end_id, else the model's. */
  readonly endIds: readonly number[];
  /** The tokens before the output that repetition penalties count: the prompt, or the decoder's start. */
  readonly contextIds: readonly number[];

  constructor(
    readonly promptIds: readonly number[],
    readonly params: ResolvedSamplingParams,
    protected readonly model: ModelIds,
    readonly subscriber: Subscriber<TokenEvent>,
    private readonly onFinish: (s: ActiveRequest) => void,
  ) {
    this.endIds = params.end_id === undefined ? model.endIds : [params.end_id];
    this.contextIds = model.decoderStart === undefined ? promptIds : [this.decoderStart];
  }

  /** An encoder-decoder's first decoder token: the request's start_id, else the model's. */
  get decoderStart(): number {
    return this.params.start_id ?? this.model.decoderStart ?? 0;
  }

  /** Rows of the batch it may take (the scheduler's unit). */
  abstract readonly width: number;
  /** Rows it has in the batch now. */
  abstract readonly rows: number;
  /** Tokens generated (for the counters). */
  abstract readonly tokensGenerated: number;
  /** The last token of each row: the next decode step's input. */
  abstract lastTokens(): number[];
  /**
   * Consumes one step's logits, `logitsOf(r)` for each of its rows r, and emits what it can. Returns,
   * when its rows change, the row each next row continues; undefined when every row goes on as it was.
   */
  abstract step(logitsOf: (row: number) => Float32Array): readonly number[] | undefined;

  get reservedTokens(): number {
    return this.width * (this.promptIds.length + this.params.request_output_len);
  }

  /** Timings for the metrics hook. */
  metrics(): RequestMetrics {
    const first = this.tokenTimes[0];
    return {
      queueMs: (this.admittedAt ?? performance.now()) - this.submittedAt,
      timeToFirstTokenMs: first === undefined ? Number.NaN : first - this.submittedAt,
      interTokenMs: this.tokenTimes.slice(1).map((t, i) => t - this.tokenTimes[i]!),
      tokens: this.tokensGenerated,
      finishReason: this.finishReason ?? 'cancelled',
    };
  }

  /**
   * The token the model forces after `generated` tokens (forced_bos first, forced_eos last), if any. It
   * wins over every processor, as transformers applies its forcing processors last: a min_length that
   * reaches request_output_len must not mask the forced end id.
   */
  protected forcedToken(generated: number): number | undefined {
    if (generated === 0 && this.model.forcedBos !== undefined) return this.model.forcedBos;
    if (generated + 1 === this.params.request_output_len && this.model.forcedEos !== undefined) return this.model.forcedEos;
    return undefined;
  }

  /** Whether the model forces its next token (its logits then do not matter: `step` may be given any row). */
  abstract readonly forcing: boolean;

  /** Marks it finished and tells the engine (before the last event goes out). */
  protected finish(reason: FinishReason): void {
    this.finishReason = reason;
    this.finished = true;
    this.onFinish(this);
  }
}

/** Whether two lists of end ids hold the same ids in the same order. */
export function sameEndIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}

/**
 * Whether greedy decoding in a device loop (ONNX Runtime's GreedySearch, which takes the argmax of the
 * raw logits and stops at the model's end ids) gives exactly the tokens this request would: greedy, one
 * sequence, no processors, no log-probabilities, no stop words, the model's own end ids.
 */
export function deviceGreedyEligible(s: ActiveRequest, model: ModelIds): s is Sequence {
  return argmaxEligible(s, model) && model.decoderStart === undefined && model.forcedBos === undefined && model.forcedEos === undefined;
}

/**
 * Whether the raw argmax of each step's logits gives exactly the tokens this request would, at the
 * steps where the model forces no token (the conditions of deviceGreedyEligible but the loop's).
 */
export function argmaxEligible(s: ActiveRequest, model: ModelIds): s is Sequence {
  return s.params.min_length === 0 && bannedArgmaxEligible(s, model);
}

/**
 * Whether the argmax of each step's logits, passing over the end id while min_length bans it, gives
 * exactly the tokens this request would (argmaxEligible, min_length aside: the argmax passes over one
 * id, so a min_length with several end ids goes through the sampler, which bans them all).
 */
export function bannedArgmaxEligible(s: ActiveRequest, model: ModelIds): s is Sequence {
  const p = s.params;
  return (
    s instanceof Sequence &&
    p.beam_width === 1 &&
    p.temperature === 0 &&
    p.repetition_penalty === 1 &&
    p.presence_penalty === 0 &&
    p.frequency_penalty === 0 &&
    !p.is_return_log_probs &&
    p.top_logprobs === 0 &&
    p.bad_words.length === 0 &&
    p.stop_words.length === 0 &&
    sameEndIds(s.endIds, model.endIds) &&
    (p.min_length === 0 || s.endIds.length <= 1)
  );
}

/** The k most likely tokens of `logits` and their log-probabilities, most likely first (impossible ones left out). */
export function topLogProbs(logits: Float32Array, k: number): Array<{ token: number; logProb: number }> {
  const norm = logSumExp(logits);
  return topIndices(logits, k)
    .filter((token) => logits[token] !== -Infinity)
    .map((token) => ({ token, logProb: logits[token]! - norm }));
}

const EMPTY_PAIRS = new Int32Array(0);

/** A request that samples (or decodes greedily): one row, each token emitted as it is chosen. */
export class Sequence extends ActiveRequest {
  readonly width = 1;
  readonly rows = 1;
  readonly outputIds: number[] = [];
  readonly outputCounts = new Map<number, number>();
  readonly processors: LogitsProcessor[];
  readonly random: () => number;
  topP: number;
  cumLogProb = 0;
  /**
   * With a penalty on: (id, output count) pairs of every id it touches (the context's for repetition,
   * then each new output id), kept up to date token by token for `samplerRow`; `penaltyAt` finds a pair.
   */
  private penaltyPairs: Int32Array | undefined;
  private penaltyLength = 0;
  private readonly penaltyAt = new Map<number, number>();

  constructor(promptIds: readonly number[], params: ResolvedSamplingParams, model: ModelIds, subscriber: Subscriber<TokenEvent>, onFinish: (s: ActiveRequest) => void) {
    super(promptIds, params, model, subscriber, onFinish);
    this.processors = logitsProcessors(params, model.vocabSize, this.endIds);
    this.random = uniformStream(params.random_seed);
    this.topP = params.runtime_top_p;
    if (params.repetition_penalty !== 1 || params.presence_penalty !== 0 || params.frequency_penalty !== 0) {
      this.penaltyPairs = new Int32Array(2 * (this.contextIds.length + 16));
      if (params.repetition_penalty !== 1) for (const id of this.contextIds) this.countPenalized(id, 0);
    }
  }

  /** Adds `count` to the pair of `id`, opening one if it has none. */
  private countPenalized(id: number, count: number): void {
    const at = this.penaltyAt.get(id);
    if (at !== undefined) {
      this.penaltyPairs![2 * at + 1]! += count;
      return;
    }
    if (2 * (this.penaltyLength + 1) > this.penaltyPairs!.length) {
      const grown = new Int32Array(this.penaltyPairs!.length * 2);
      grown.set(this.penaltyPairs!);
      this.penaltyPairs = grown;
    }
    this.penaltyPairs![2 * this.penaltyLength] = id;
    this.penaltyPairs![2 * this.penaltyLength + 1] = count;
    this.penaltyAt.set(id, this.penaltyLength++);
  }

  get tokensGenerated(): number {
    return this.outputIds.length;
  }

  lastTokens(): number[] {
    // Before its first token, the context's last: an encoder-decoder's start token.
    return [this.outputIds[this.outputIds.length - 1] ?? this.contextIds[this.contextIds.length - 1]!];
  }

  step(logitsOf: (row: number) => Float32Array): undefined {
    this.advance(logitsOf(0));
    return undefined;
  }

  get forcing(): boolean {
    return this.forcedToken(this.outputIds.length) !== undefined;
  }

  /**
   * This step as a sampler row, drawing its number from the stream now (the chosen token must then go
   * to `accept`); undefined when the step needs the logits here: a forced token.
   */
  samplerRow(): SamplerRow | undefined {
    const p = this.params;
    if (this.forcedToken(this.outputIds.length) !== undefined) return undefined;
    const seen = this.penaltyPairs === undefined ? EMPTY_PAIRS : this.penaltyPairs.subarray(0, 2 * this.penaltyLength);
    const bans = bannedAfter(p, this.endIds, this.outputIds);
    return {
      temperature: p.temperature,
      topP: this.topP,
      topK: p.runtime_top_k,
      topLogProbs: p.top_logprobs,
      repetition: p.repetition_penalty,
      presence: p.presence_penalty,
      frequency: p.frequency_penalty,
      uniform: p.temperature === 0 ? 0 : this.random(),
      seen,
      bans,
      beamKeep: 0,
      beamScore: 0,
    };
  }

  private endsWithStopWord(): boolean {
    const out = this.outputIds;
    return this.params.stop_words.some((phrase) => phrase.length <= out.length && phrase.every((id, i) => out[out.length - phrase.length + i] === id));
  }

  /** Chooses, records and emits the next token from this row's logits. */
  advance(logits: Float32Array): void {
    const forced = this.forcedToken(this.outputIds.length);
    if (forced !== undefined) {
      // The one token allowed, log-prob 0 (a sampled request still draws its number, keeping its stream
      // where the processors' forced row would leave it), without a row of the vocabulary's size.
      if (this.params.temperature !== 0) this.random();
      const choice = { token: forced, logProb: 0 };
      this.accept(choice, undefined, this.params.top_logprobs > 0 ? [choice] : undefined);
      return;
    }
    const state = { promptIds: this.contextIds, outputIds: this.outputIds, outputCounts: this.outputCounts, topP: this.topP };
    const processed = processLogits(this.processors, logits, state);
    const choice = this.params.temperature === 0 ? greedy(processed) : sample(processed, this.random());
    this.accept(choice, processed);
  }

  /**
   * Records and emits a chosen token: from `advance`, or one chosen where the logits are (GreedySearch,
   * the native engine), which comes without them: the native sampler sends the most likely ids itself
   * (`top`), GreedySearch serves requests that ask for none.
   */
  accept(choice: { token: number; logProb: number }, processed?: Float32Array, top?: Array<{ token: number; logProb: number }>): void {
    this.outputIds.push(choice.token);
    this.outputCounts.set(choice.token, (this.outputCounts.get(choice.token) ?? 0) + 1);
    if (this.penaltyPairs !== undefined) this.countPenalized(choice.token, 1);
    this.topP = nextTopP(this.topP, choice.token, this.params);
    this.cumLogProb += choice.logProb;
    let finishReason: FinishReason | undefined;
    if (this.endIds.includes(choice.token)) finishReason = 'end_id';
    else if (this.endsWithStopWord()) finishReason = 'stop';
    else if (this.outputIds.length >= this.params.request_output_len) finishReason = 'length';
    this.tokenTimes.push(performance.now());
    const event: TokenEvent = { token: choice.token, index: this.outputIds.length - 1 };
    if (this.params.is_return_log_probs) Object.assign(event, { logProb: choice.logProb, cumLogProb: this.cumLogProb });
    if (this.params.top_logprobs > 0) {
      if (top !== undefined) event.topLogProbs = top;
      else if (processed !== undefined) event.topLogProbs = topLogProbs(processed, this.params.top_logprobs);
    }
    if (finishReason) {
      event.finishReason = finishReason;
      this.finish(finishReason);
    }
    this.subscriber.next(event);
    if (finishReason) this.subscriber.complete();
  }
}
