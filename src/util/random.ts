/** Seeded pseudo-random numbers: the same seed gives the same stream on every machine. */

/**
 * Uniform numbers in (0, 1) from mulberry32, seeded with any safe integer (both 32-bit halves count; a
 * seed below 2^32 is the state itself, which the committed golden checkpoints depend on).
 */
export function uniformStream(seed: number): () => number {
  let state = (seed ^ Math.floor(seed / 4294967296)) >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
}
