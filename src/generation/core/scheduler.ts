/**
 * The scheduler: which sequences wait, which run, and when a waiting one may join. It knows nothing of
 * ONNX Runtime; the engine asks it what to do between decode steps.
 *
 * Invariant (checked at every `schedule()`): the rows of running sequences (one each, beam_width for beam
 * search) stay within maxBatchSize, and the tokens they reserve (rows * (prompt + request_output_len),
 * each row's share rounded up to whole blocks when the cache comes in blocks) stay within kvTokenBudget.
 * A sequence is admitted in arrival order as soon as both hold with it added; one that could never fit
 * is refused at submit.
 */
import { ChorusError } from '../../errors.ts';

/** What the scheduler needs to know of a sequence. */
export interface Schedulable {
  /** Prompt tokens plus the most tokens it may generate: what it reserves in the cache. */
  readonly reservedTokens: number;
  /** Rows of the batch it takes (default 1; beam_width for beam search). */
  readonly width?: number;
  /** Set when the client went away; the sequence leaves at the next step. */
  cancelled: boolean;
  /** Set when it finished generating. */
  finished: boolean;
}

/** Limits of one engine. */
export interface SchedulerLimits {
  /** Most rows decoded together. */
  maxBatchSize: number;
  /** Most sequences waiting; beyond it, submit fails with CHORUS_OVERLOADED. */
  maxQueue: number;
  /** Most cache tokens reserved by running sequences together. */
  kvTokenBudget: number;
  /** The model's context: a sequence reserving more can never run. */
  contextLength: number;
  /**
   * Tokens per cache block, when the cache is paged: each row then reserves whole blocks, and
   * kvTokenBudget is the blocks' tokens. Unset: a row reserves exactly its tokens.
   */
  blockSize?: number;
}

/** The waiting and running sequences, and the admission rule. */
export class Scheduler<S extends Schedulable> {
  readonly waiting: S[] = [];
  running: S[] = [];

  constructor(readonly limits: SchedulerLimits) {}

  /** Queues a sequence, or throws when it can never fit or the queue is full. */
  enqueue(sequence: S): void {
    const { contextLength, kvTokenBudget, maxQueue, maxBatchSize } = this.limits;
    const width = sequence.width ?? 1;
    if (width > maxBatchSize) throw new ChorusError('CHORUS_CANNOT_FIT', `beam_width ${width} needs ${width} rows of a batch that holds ${maxBatchSize}`, { param: 'beam_width' });
    const perRow = sequence.reservedTokens / width;
    const cost = this.cost(sequence);
    if (perRow > contextLength || cost > kvTokenBudget) {
      const beams = width > 1 ? ` (times beam_width ${width}: ${cost} in the cache)` : '';
      const block = this.limits.blockSize ?? 1;
      const most = Math.min(contextLength, Math.floor(kvTokenBudget / width / block) * block);
      throw new ChorusError('CHORUS_CANNOT_FIT', `the prompt plus request_output_len is ${perRow} tokens${beams}, more than the ${most} this model can hold`);
    }
    if (this.waiting.length >= maxQueue) throw new ChorusError('CHORUS_OVERLOADED', `the queue holds ${maxQueue} waiting requests already; retry later`);
    this.waiting.push(sequence);
  }

  /**
   * Between steps: drops finished and cancelled sequences (running or waiting), then admits waiting ones
   * in order while the batch and the cache budget allow (and `admits`, when given, takes the next one).
   * Returns those admitted (to be prefilled) and those that left.
   */
  schedule(admits?: (sequence: S) => boolean): { admitted: S[]; left: S[] } {
    const left = [...this.running.filter((s) => s.finished || s.cancelled), ...this.waiting.filter((s) => s.cancelled)];
    if (left.length > 0) {
      this.running = this.running.filter((s) => !s.finished && !s.cancelled);
      for (let i = this.waiting.length - 1; i >= 0; i--) if (this.waiting[i]!.cancelled) this.waiting.splice(i, 1);
    }
    const admitted: S[] = [];
    let reserved = this.reserved();
    let rows = this.rows();
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!;
      if (!this.fits(next, rows, reserved) || admits?.(next) === false) break;
      this.waiting.shift();
      admitted.push(next);
      reserved += this.cost(next);
      rows += next.width ?? 1;
    }
    this.running = [...this.running, ...admitted];
    return { admitted, left };
  }

  /** Whether the first waiting sequence fits beside the running ones now (false when none waits). */
  nextFits(): boolean {
    const next = this.waiting[0];
    return next !== undefined && this.fits(next, this.rows(), this.reserved());
  }

  /** Whether `next` fits beside running sequences of `rows` rows reserving `reserved` tokens. */
  private fits(next: S, rows: number, reserved: number): boolean {
    return rows + (next.width ?? 1) <= this.limits.maxBatchSize && reserved + this.cost(next) <= this.limits.kvTokenBudget;
  }

  /** Cache tokens `sequence` reserves: its rows' tokens, each row's rounded up to whole blocks when paged. */
  private cost(sequence: S): number {
    const block = this.limits.blockSize;
    if (block === undefined) return sequence.reservedTokens;
    const width = sequence.width ?? 1;
    return width * Math.ceil(sequence.reservedTokens / width / block) * block;
  }

  /** Batch rows taken by running sequences. */
  rows(): number {
    return this.running.reduce((sum, s) => sum + (s.width ?? 1), 0);
  }

  /** Cache tokens reserved by running sequences. */
  reserved(): number {
    return this.running.reduce((sum, s) => sum + this.cost(s), 0);
  }
}
