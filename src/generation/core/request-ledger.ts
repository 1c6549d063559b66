/**
 * What the engines do with requests around their own step loops: turn a request into a validated
 * Sequence behind the Observable `submit` returns, and account for it once when it ends (counters, and
 * the per-request metrics hook).
 */
import { Observable, type Subscriber } from 'rxjs';
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { GenerateRequest, RequestMetrics, TokenEvent } from './engine.ts';
import { checkDecodingMode } from './beam-guard.ts';
import { BeamSequence } from './beam-sequence.ts';
import { validateInputIds, validateSamplingParams } from './sampling-params.ts';
import { Sequence, type ActiveRequest, type ModelIds } from './sequence.ts';

/** Counters every engine reports in its stats. */
export interface RequestCounters {
  steps: number;
  /** Steps that prefilled admitted requests, and steps that decoded the running batch. */
  prefillSteps: number;
  decodeSteps: number;
  /** Rows decoded over all decode steps: divided by decodeSteps, the mean batch occupancy. */
  decodedRows: number;
  /** Batches run through the GreedySearch fast path, and the requests they held. */
  greedySearchRuns: number;
  greedySearchRows: number;
  tokensGenerated: number;
  requestsFinished: number;
  requestsCancelled: number;
}

export class RequestLedger {
  readonly counters: RequestCounters = { steps: 0, prefillSteps: 0, decodeSteps: 0, decodedRows: 0, greedySearchRuns: 0, greedySearchRows: 0, tokensGenerated: 0, requestsFinished: 0, requestsCancelled: 0 };

  private closed = false;

  constructor(private readonly onRequestDone: ((metrics: RequestMetrics) => void) | undefined) {}

  /**
   * An engine's `submit`: on subscription the request is opened and handed to `enqueue` (an error of
   * either goes to the subscriber); unsubscribing cancels it (and calls `onCancel`).
   */
  submit(request: GenerateRequest, model: ModelIds, enqueue: (s: ActiveRequest) => void, onCancel?: () => void): Observable<TokenEvent> {
    return new Observable<TokenEvent>((subscriber) => {
      let sequence: ActiveRequest;
      try {
        sequence = this.open(request, subscriber, model);
        enqueue(sequence);
      } catch (error) {
        subscriber.error(error);
        return undefined;
      }
      return () => {
        if (sequence.finished) return;
        sequence.cancelled = true;
        onCancel?.();
      };
    });
  }

  /** The request made active (sampling or beam search), or an error naming the bad field (or saying the engine is closed). */
  open(request: GenerateRequest, subscriber: Subscriber<TokenEvent>, model: ModelIds): ActiveRequest {
    if (this.closed) throw new ChorusError('CHORUS_CLOSED', 'the engine is closed; it takes no new requests');
    const params = validateSamplingParams(request.params ?? {}, model.vocabSize);
    // A decoder-only model may start from nothing: the start id (FT's start_id, else its BOS) is the prompt.
    const start = model.decoderStart === undefined ? (params.start_id ?? model.bosId) : undefined;
    if (request.inputIds.length === 0 && model.decoderStart === undefined && start === undefined) {
      throw invalidArgument('inputIds', 'at least one token id, or a start_id (this model has no bos_token_id to start from)', request.inputIds);
    }
    validateInputIds(request.inputIds, model.vocabSize, start !== undefined);
    const prompt = request.inputIds.length === 0 && start !== undefined ? [start] : [...request.inputIds];
    checkDecodingMode(params);
    const Kind = params.beam_width > 1 ? BeamSequence : Sequence;
    return new Kind(prompt, params, model, subscriber, (s) => this.report(s));
  }

  /** From now on, `open` refuses requests. */
  close(): void {
    this.closed = true;
  }

  /** Counts a request that ended (finished, failed or cancelled) and hands its timings to the hook, once. */
  report(s: ActiveRequest): void {
    if (s.reported) return;
    s.reported = true;
    this.counters.tokensGenerated += s.tokensGenerated;
    if (s.finished) this.counters.requestsFinished++;
    else this.counters.requestsCancelled++;
    this.onRequestDone?.(s.metrics());
  }
}
