/**
 * T5's relative position buckets, as a lookup table over relative positions -maxDistance..maxDistance
 * (beyond that the bucket no longer changes). The arithmetic is transformers' `_relative_position_bucket`
 * in float32, step by step, so boundaries land where they land there.
 */

/** bucket[r + maxDistance] for r = key position - query position. */
export function relativeBucketTable(bidirectional: boolean, numBuckets: number, maxDistance: number): number[] {
  const table: number[] = [];
  for (let r = -maxDistance; r <= maxDistance; r++) table.push(relativeBucket(r, bidirectional, numBuckets, maxDistance));
  return table;
}

function relativeBucket(relative: number, bidirectional: boolean, numBuckets: number, maxDistance: number): number {
  let buckets = numBuckets;
  let bucket = 0;
  let distance: number;
  if (bidirectional) {
    buckets = Math.floor(buckets / 2);
    if (relative > 0) bucket += buckets;
    distance = Math.abs(relative);
  } else {
    distance = Math.max(-relative, 0);
  }
  const maxExact = Math.floor(buckets / 2);
  if (distance < maxExact) return bucket + distance;
  const f = Math.fround;
  const ratio = f(f(distance) / f(maxExact));
  const scaled = f(f(f(Math.log(ratio)) / f(Math.log(maxDistance / maxExact))) * f(buckets - maxExact));
  const large = Math.min(maxExact + Math.trunc(scaled), buckets - 1);
  return bucket + large;
}
