/** The engine interface the rest of Chorus sees: requests in, streams of token events out. */
import type { Observable } from 'rxjs';
import type { RequestCounters } from './request-ledger.ts';
import type { SamplingParams } from './sampling-params.ts';

/** One generation request. */
export interface GenerateRequest {
  /** The prompt's token ids (with any BOS the tokenizer adds). */
  inputIds: readonly number[];
  params?: SamplingParams;
  /**
   * false: the caller reads the tokens only when the request ends, so an engine may generate them all
   * in one device run (the GreedySearch fast path) and emit them together. Default: true.
   */
  stream?: boolean;
}

/** Why a sequence stopped. */
export type FinishReason = 'length' | 'end_id' | 'stop' | 'cancelled';

/** One generated token. The last event of a stream carries `finishReason`. */
export interface TokenEvent {
  token: number;
  /** 0 for the first generated token. */
  index: number;
  /** log P(token) under the distribution it was drawn from (with is_return_log_probs). */
  logProb?: number;
  /** Sum of the log-probabilities so far (with is_return_log_probs). */
  cumLogProb?: number;
  /** With top_logprobs k: the step's k most likely tokens, most likely first, under the same distribution. */
  topLogProbs?: Array<{ token: number; logProb: number }>;
  finishReason?: FinishReason;
  /**
   * Beam search only: which returned sequence the token belongs to (0 is the best). Beam results come
   * when the search ends, each sequence's tokens in order.
   */
  sequence?: number;
  /** Beam search only, on a sequence's last event: cumLogProb / length^len_penalty, what beams are ranked by. */
  score?: number;
}

/** What the engine is doing, for metrics and tests. */
export interface EngineStats extends RequestCounters {
  running: number;
  waiting: number;
  /** Cache tokens reserved by running sequences. */
  reservedTokens: number;
  /** Columns of the batched cache times its rows: what it holds now, padding included. */
  cacheTokens: number;
}

/** One request's timings, reported when it ends (milliseconds). */
export interface RequestMetrics {
  /** From submission to admission into the batch. */
  queueMs: number;
  /** From submission to the first token. */
  timeToFirstTokenMs: number;
  /** Between consecutive tokens. */
  interTokenMs: number[];
  tokens: number;
  finishReason: FinishReason;
}

/** A generation engine. */
export interface Engine {
  /** Starts generating on subscription; unsubscribing cancels the request within one step. */
  submit(request: GenerateRequest): Observable<TokenEvent>;
  stats(): EngineStats;
  close(): Promise<void>;
}
