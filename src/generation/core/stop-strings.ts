/**
 * Stop strings on streamed text: deltas go in, text comes out up to (not including) the first stop
 * string, even when a stop string is split across deltas. Text that could still be the start of a stop
 * string is held back until the next delta decides it.
 */

/** What one `push` gives back: the text that is safe to emit, and whether a stop string was reached. */
export interface StopMatch {
  text: string;
  stopped: boolean;
}

/** Matches stop strings across the deltas of one stream. */
export class StopStringMatcher {
  private pending = '';
  private done = false;

  constructor(private readonly stops: readonly string[]) {
    if (stops.some((s) => s === '')) throw new RangeError('stop strings must not be empty');
  }

  /** Adds a delta; returns what may be emitted now. After a stop, everything else is dropped. */
  push(delta: string): StopMatch {
    if (this.done) return { text: '', stopped: true };
    this.pending += delta;
    let first = -1;
    for (const stop of this.stops) {
      const at = this.pending.indexOf(stop);
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
      this.done = true;
      const text = this.pending.slice(0, first);
      this.pending = '';
      return { text, stopped: true };
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    let hold = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, this.pending.length); n > hold; n--) {
        if (this.pending.endsWith(stop.slice(0, n))) {
          hold = n;
          break;
        }
      }
    }
    const text = this.pending.slice(0, this.pending.length - hold);
    this.pending = this.pending.slice(this.pending.length - hold);
    return { text, stopped: false };
  }

  /** The end of the stream: whatever was held back (it never became a stop string). */
  flush(): string {
    const text = this.done ? '' : this.pending;
    this.pending = '';
    return text;
  }
}
