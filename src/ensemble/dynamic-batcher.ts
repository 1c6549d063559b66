/**
 * Triton's dynamic batcher: requests (each of one or more rows) wait in a queue and run together. A
 * batch runs as soon as the rows waiting reach a preferred batch size (the largest that fits), or the
 * oldest request has waited `max_queue_delay_microseconds`, never above `max_batch_size` rows. With
 * several instances (`instance_group { count }`), up to that many batches run at once, each on its
 * own instance.
 */

export interface BatcherOptions {
  maxBatchSize: number;
  /** Row counts worth running at once, without waiting. Default: [maxBatchSize]. */
  preferredBatchSizes?: number[];
  /** How long the oldest request may wait for company. Default: 0 (run what is there). */
  maxQueueDelayMicros?: number;
  /** Instances that run batches concurrently. Default: 1. */
  instances?: number;
}

interface Pending<I, O> {
  input: I;
  rows: number;
  resolve: (output: O) => void;
  reject: (error: unknown) => void;
  since: number;
}

/** What the batcher has done, for tests and metrics. */
export interface BatcherStats {
  /** Batches run (Triton's execution count). */
  executions: number;
  /** Requests served (Triton's inference count counts rows; this counts requests). */
  requests: number;
  rows: number;
}

export class DynamicBatcher<I, O> {
  private readonly queue: Array<Pending<I, O>> = [];
  private readonly idle: number[];
  private timer: NodeJS.Timeout | undefined;
  readonly stats: BatcherStats = { executions: 0, requests: 0, rows: 0 };
  private readonly preferred: number[];

  /**
   * `run(instance, inputs)` runs one batch on an instance and returns one output per input, in order;
   * `rowsOf` says how many rows an input holds.
   */
  constructor(
    private readonly options: BatcherOptions,
    private readonly rowsOf: (input: I) => number,
    private readonly run: (instance: number, inputs: I[]) => Promise<O[]>,
  ) {
    this.idle = Array.from({ length: options.instances ?? 1 }, (_, i) => i);
    this.preferred = [...(options.preferredBatchSizes ?? [options.maxBatchSize])].sort((a, b) => b - a);
  }

  /** Queues one request; resolves with its own output. */
  submit(input: I): Promise<O> {
    const rows = this.rowsOf(input);
    if (rows > this.options.maxBatchSize) return Promise.reject(new RangeError(`a request of ${rows} rows exceeds max_batch_size ${this.options.maxBatchSize}`));
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ input, rows, resolve, reject, since: performance.now() });
      this.dispatch();
    });
  }

  private waitingRows(): number {
    return this.queue.reduce((sum, p) => sum + p.rows, 0);
  }

  private dispatch(): void {
    const max = this.options.maxBatchSize;
    const largest = this.preferred.find((size) => size <= max) ?? max;
    while (this.queue.length > 0 && this.idle.length > 0) {
      const waiting = this.waitingRows();
      const delay = (this.options.maxQueueDelayMicros ?? 0) / 1000;
      const waited = performance.now() - this.queue[0]!.since;
      if (waiting < largest && waited < delay) {
        this.timer ??= setTimeout(() => {
          this.timer = undefined;
          this.dispatch();
        }, Math.max(0, delay - waited));
        return;
      }
      // The largest preferred size the queue can fill, else as many rows as fit.
      const limit = this.preferred.find((size) => size <= Math.min(waiting, max)) ?? max;
      const batch: Array<Pending<I, O>> = [];
      let rows = 0;
      while (this.queue.length > 0 && rows + this.queue[0]!.rows <= limit) {
        const next = this.queue.shift()!;
        rows += next.rows;
        batch.push(next);
      }
      if (batch.length === 0) batch.push(this.queue.shift()!);
      this.execute(this.idle.shift()!, batch);
    }
  }

  private execute(instance: number, batch: Array<Pending<I, O>>): void {
    this.stats.executions++;
    this.stats.requests += batch.length;
    this.stats.rows += batch.reduce((sum, p) => sum + p.rows, 0);
    this.run(
      instance,
      batch.map((p) => p.input),
    )
      .then((outputs) => batch.forEach((p, i) => p.resolve(outputs[i]!)))
      .catch((error: unknown) => batch.forEach((p) => p.reject(error)))
      .finally(() => {
        this.idle.push(instance);
        this.dispatch();
      });
  }

  /** Requests are queued or running. */
  get busy(): boolean {
    return this.queue.length > 0 || this.idle.length < (this.options.instances ?? 1);
  }

  /** Stops the delay timer (requests still queued are left to fail with the model). */
  close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
  }
}
