/**
 * One request inside an engine: its parameters, processors, seeded random stream and output so far.
 * `advance` turns one row of raw logits into the next token, records it, and emits it.
 */
import type { Subscriber } from 'rxjs';
import { uniformStream } from '../util/random.ts';
import type { FinishReason, RequestMetrics, TokenEvent } from './engine.ts';
import { logitsProcessors, nextTopP, processLogits, type LogitsProcessor } from './processors/index.ts';
import { greedy, sample } from './sampler.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';
import type { Schedulable } from './scheduler.ts';

export class Sequence implements Schedulable {
  cancelled = false;
  finished = false;
  readonly outputIds: number[] = [];
  readonly outputCounts = new Map<number, number>();
  readonly processors: LogitsProcessor[];
  readonly random: () => number;
  topP: number;
  cumLogProb = 0;
  readonly submittedAt = performance.now();
  admittedAt: number | undefined;
  readonly tokenTimes: number[] = [];
  finishReason: FinishReason | undefined;
  reported = false;

  constructor(
    readonly promptIds: readonly number[],
    readonly params: ResolvedSamplingParams,
    readonly endId: number | undefined,
    vocabSize: number,
    readonly subscriber: Subscriber<TokenEvent>,
    private readonly onFinish: (s: Sequence) => void,
  ) {
    this.processors = logitsProcessors(params, vocabSize, endId);
    this.random = uniformStream(params.random_seed);
    this.topP = params.runtime_top_p;
  }

  /** Timings for the metrics hook. */
  metrics(): RequestMetrics {
    const first = this.tokenTimes[0];
    return {
      queueMs: (this.admittedAt ?? performance.now()) - this.submittedAt,
      timeToFirstTokenMs: first === undefined ? Number.NaN : first - this.submittedAt,
      interTokenMs: this.tokenTimes.slice(1).map((t, i) => t - this.tokenTimes[i]!),
      tokens: this.outputIds.length,
      finishReason: this.finishReason ?? 'cancelled',
    };
  }

  private endsWithStopWord(): boolean {
    const out = this.outputIds;
    return this.params.stop_words.some((phrase) => phrase.length <= out.length && phrase.every((id, i) => out[out.length - phrase.length + i] === id));
  }

  get reservedTokens(): number {
    return this.promptIds.length + this.params.request_output_len;
  }

  /** Chooses, records and emits the next token from this row's raw logits. */
  advance(logits: Float32Array): void {
    const state = { promptIds: this.promptIds, outputIds: this.outputIds, outputCounts: this.outputCounts, topP: this.topP };
    const processed = processLogits(this.processors, logits, state);
    const choice = this.params.temperature === 0 ? greedy(processed) : sample(processed, this.random());
    this.outputIds.push(choice.token);
    this.outputCounts.set(choice.token, (this.outputCounts.get(choice.token) ?? 0) + 1);
    this.topP = nextTopP(this.topP, choice.token, this.params);
    this.cumLogProb += choice.logProb;
    let finishReason: FinishReason | undefined;
    if (choice.token === this.endId) finishReason = 'end_id';
    else if (this.endsWithStopWord()) finishReason = 'stop';
    else if (this.outputIds.length >= this.params.request_output_len) finishReason = 'length';
    this.tokenTimes.push(performance.now());
    this.finishReason = finishReason;
    const event: TokenEvent = { token: choice.token, index: this.outputIds.length - 1 };
    if (this.params.is_return_log_probs) Object.assign(event, { logProb: choice.logProb, cumLogProb: this.cumLogProb });
    if (finishReason) event.finishReason = finishReason;
    this.finished = finishReason !== undefined;
    if (this.finished) this.onFinish(this);
    this.subscriber.next(event);
    if (this.finished) this.subscriber.complete();
  }
}
