/** Index of the largest of `length` values from `offset` (the first among equals). */
export function argmax(values: Float32Array, offset = 0, length = values.length - offset): number {
  let best = 0;
  for (let i = 1; i < length; i++) if (values[offset + i]! > values[offset + best]!) best = i;
  return best;
}
