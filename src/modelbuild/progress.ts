/** How a build's progress and cost are told: byte counts as people read them, and percentages in steps. */

/** `13.5 GB`, `812 MB`, `4.0 KB` (decimal units, as checkpoints are sized on the hub). */
export function bytesText(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * A weights-progress callback for logs: calls `log` once each time the written share passes another
 * `step` percent (10, 20, ... 100), with the bytes written and in all.
 */
export function percentSteps(log: (percent: number, done: number, total: number) => void, step = 10): (done: number, total: number) => void {
  let told = 0;
  return (done, total) => {
    const percent = total > 0 ? Math.floor((done / total) * 100) : 100;
    const reached = Math.floor(percent / step) * step;
    if (reached > told) {
      told = reached;
      log(reached, done, total);
    }
  };
}
