/**
 * The scheduler: which sequences wait, which run, and when a waiting one may join. It knows nothing of
 * ONNX Runtime; the engine asks it what to do between decode steps.
 *
 * Invariant (checked at every `schedule()`): running.length <= maxBatchSize, and the tokens reserved by
 * running sequences (prompt + request_output_len each) stay within kvTokenBudget. A sequence is admitted
 * in arrival order as soon as both hold with it added; one that could never fit is refused at submit.
 */
import { ChorusError } from '../errors.ts';

/** What the scheduler needs to know of a sequence. */
export interface Schedulable {
  /** Prompt tokens plus the most tokens it may generate: what it reserves in the cache. */
  readonly reservedTokens: number;
  /** Set when the client went away; the sequence leaves at the next step. */
  cancelled: boolean;
  /** Set when it finished generating. */
  finished: boolean;
}

/** Limits of one engine. */
export interface SchedulerLimits {
  /** Most sequences decoded together. */
  maxBatchSize: number;
  /** Most sequences waiting; beyond it, submit fails with CHORUS_OVERLOADED. */
  maxQueue: number;
  /** Most cache tokens reserved by running sequences together. */
  kvTokenBudget: number;
  /** The model's context: a sequence reserving more can never run. */
  contextLength: number;
}

/** The waiting and running sequences, and the admission rule. */
export class Scheduler<S extends Schedulable> {
  readonly waiting: S[] = [];
  running: S[] = [];

  constructor(readonly limits: SchedulerLimits) {}

  /** Queues a sequence, or throws when it can never fit or the queue is full. */
  enqueue(sequence: S): void {
    const { contextLength, kvTokenBudget, maxQueue } = this.limits;
    if (sequence.reservedTokens > contextLength || sequence.reservedTokens > kvTokenBudget) {
      throw new ChorusError(
        'CHORUS_CANNOT_FIT',
        `the prompt plus request_output_len is ${sequence.reservedTokens} tokens, more than the ${Math.min(contextLength, kvTokenBudget)} this model can hold`,
      );
    }
    if (this.waiting.length >= maxQueue) throw new ChorusError('CHORUS_OVERLOADED', `the queue holds ${maxQueue} waiting requests already; retry later`);
    this.waiting.push(sequence);
  }

  /**
   * Between steps: drops finished and cancelled sequences (running or waiting), then admits waiting ones
   * in order while the batch and the cache budget allow. Returns those admitted (to be prefilled) and
   * those that left.
   */
  schedule(): { admitted: S[]; left: S[] } {
    const left = [...this.running.filter((s) => s.finished || s.cancelled), ...this.waiting.filter((s) => s.cancelled)];
    if (left.length > 0) {
      this.running = this.running.filter((s) => !s.finished && !s.cancelled);
      for (let i = this.waiting.length - 1; i >= 0; i--) if (this.waiting[i]!.cancelled) this.waiting.splice(i, 1);
    }
    const admitted: S[] = [];
    let reserved = this.reserved();
    while (this.waiting.length > 0 && this.running.length + admitted.length < this.limits.maxBatchSize) {
      const next = this.waiting[0]!;
      if (reserved + next.reservedTokens > this.limits.kvTokenBudget) break;
      this.waiting.shift();
      admitted.push(next);
      reserved += next.reservedTokens;
    }
    this.running = [...this.running, ...admitted];
    return { admitted, left };
  }

  /** Cache tokens reserved by running sequences. */
  reserved(): number {
    return this.running.reduce((sum, s) => sum + s.reservedTokens, 0);
  }
}
