/**
 * An engine's loop over its queue: `body` runs until the work it takes is done, started a turn after
 * the first request that wakes it (so requests submitted together are taken together) and started again
 * when `pending` says work arrived as it ended. At most one `body` runs at a time.
 */
export class TurnLoop {
  private running: Promise<void> | undefined;

  constructor(
    private readonly body: () => Promise<void>,
    private readonly pending: () => boolean,
  ) {}

  /** Starts the loop unless it runs. */
  start(): void {
    this.running ??= new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.body())
      .finally(() => {
        this.running = undefined;
        if (this.pending()) this.start();
      });
  }

  /** Resolves when the run under way (if any) has ended. */
  async idle(): Promise<void> {
    await this.running;
  }
}
