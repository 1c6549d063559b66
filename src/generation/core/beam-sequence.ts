/**
 * A beam-search request inside an engine: one row (its prompt) until the first step, then beam_width
 * rows. Beams change until the search ends, so nothing is streamed before then; at the end the best
 * `num_return_sequences` hypotheses are emitted one after another, best first, each token event
 * carrying `sequence` (its rank) and the last one its finish reason and `score`.
 */
import type { Subscriber } from 'rxjs';
import type { NativeBeamGroup } from '../../native/index.ts';
import { BeamSearch, type BeamContinuation } from './beam-search.ts';
import type { TokenEvent } from './engine.ts';
import type { SamplerRow } from './sampler.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';
import { ActiveRequest, type ModelIds } from './sequence.ts';

export class BeamSequence extends ActiveRequest {
  readonly width: number;
  private readonly search: BeamSearch;
  private emitted = 0;

  constructor(promptIds: readonly number[], params: ResolvedSamplingParams, model: ModelIds, subscriber: Subscriber<TokenEvent>, onFinish: (s: ActiveRequest) => void) {
    super(promptIds, params, model, subscriber, onFinish);
    this.width = params.beam_width;
    this.search = new BeamSearch(this.contextIds, params, this.endIds);
  }

  get rows(): number {
    return this.search.generated === 0 ? 1 : this.width;
  }

  get tokensGenerated(): number {
    return this.emitted;
  }

  lastTokens(): number[] {
    // Before the first step, its one row ends with the context's last token (an encoder-decoder's start).
    return this.search.generated === 0 ? [this.contextIds[this.contextIds.length - 1]!] : this.search.lastTokens();
  }

  step(logitsOf: (row: number) => Float32Array): readonly number[] {
    const generated = this.search.generated;
    // Before the first step every beam continues the prompt's single row.
    const parents = this.search.step((b) => logitsOf(generated === 0 ? 0 : b), this.forcedToken(generated));
    if (this.search.done) this.emit();
    return parents;
  }

  /**
   * This step's rows for the native sampler's beam mode (each live beam's processors and score), or
   * undefined when the step needs the logits here (a token the model forces).
   */
  get forcing(): boolean {
    return this.forcedToken(this.search.generated) !== undefined;
  }

  samplerRows(): SamplerRow[] | undefined {
    if (this.forcing) return undefined;
    return Array.from({ length: this.rows }, (_, b) => this.search.samplerRow(b));
  }

  /** `step` from each row's continuations, as the native sampler returns them. */
  stepContinuations(continuationsOf: (row: number) => readonly BeamContinuation[]): readonly number[] {
    const parents = this.search.stepWith(continuationsOf);
    if (this.search.done) this.emit();
    return parents;
  }

  /**
   * How many of its next steps the native engine's beam run may take (0: none): up to the last, or
   * to the one before a token the model forces (forced_eos).
   */
  runnableSteps(): number {
    if (!this.search.runnable) return 0;
    const generated = this.search.generated;
    const end = this.params.request_output_len - (this.forcedToken(this.params.request_output_len - 1) === undefined ? 0 : 1);
    return Math.max(0, end - generated);
  }

  /** This search as a group of a beam run, its beams in rows firstRow, firstRow + 1, ... */
  runGroup(firstRow: number): NativeBeamGroup {
    const state = this.search.runState();
    const p = this.params;
    return {
      firstRow,
      width: this.width,
      outputLength: p.request_output_len,
      generated: state.generated,
      minLength: p.min_length,
      endIds: Int32Array.from(state.endIds),
      earlyStopping: p.early_stopping === 'never' ? 2 : p.early_stopping ? 1 : 0,
      improvable: state.improvable,
      temperature: p.temperature,
      lenPenalty: p.len_penalty,
      diversityRate: p.beam_search_diversity_rate,
      scores: Float64Array.from(state.scores),
      finished: Float64Array.from(state.finished),
    };
  }

  private emit(): void {
    const results = this.search.results();
    const events: TokenEvent[] = [];
    results.forEach((hypothesis, sequence) => {
      let cum = 0;
      hypothesis.tokens.forEach((token, index) => {
        const event: TokenEvent = { token, index, sequence };
        if (this.params.is_return_log_probs) {
          cum += hypothesis.logProbs[index]!;
          Object.assign(event, { logProb: hypothesis.logProbs[index], cumLogProb: cum });
        }
        if (index === hypothesis.tokens.length - 1) Object.assign(event, { finishReason: hypothesis.finishReason, score: hypothesis.score });
        events.push(event);
      });
    });
    // Every token goes out now: their times are in the metrics the engine reports when it finishes.
    const now = performance.now();
    for (let i = 0; i < events.length; i++) this.tokenTimes.push(now);
    this.emitted = events.length;
    this.finish(results[0]?.finishReason ?? 'length');
    for (const event of events) this.subscriber.next(event);
    this.subscriber.complete();
  }
}
