/** Index of the largest of `length` values from `offset` (the first among equals). */
export function argmax(values: Float32Array, offset = 0, length = values.length - offset): number {
  let best = 0;
  for (let i = 1; i < length; i++) if (values[offset + i]! > values[offset + best]!) best = i;
  return best;
}

/** Indices of the `k` largest values, largest first (the lower index first among equals). */
export function topIndices(values: Float32Array, k: number): number[] {
  const best: number[] = [];
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (best.length === k && !(v > values[best[k - 1]!]!)) continue;
    let at = best.length === k ? k - 1 : best.length;
    while (at > 0 && values[best[at - 1]!]! < v) at--;
    best.splice(at, 0, i);
    if (best.length > k) best.pop();
  }
  return best;
}

/** log(sum(exp(values))), stable; -inf when every value is -inf. */
export function logSumExp(values: Float32Array): number {
  let max = -Infinity;
  for (const value of values) if (value > max) max = value;
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (const value of values) sum += Math.exp(value - max);
  return max + Math.log(sum);
}
