/** Seeded pseudo-random numbers: the same seed gives the same stream on every machine. */

/**
 * Uniform numbers in (0, 1) from mulberry32, seeded with any integer of the uint64 range (a bigint where
 * it is beyond 2^53). The state is 32 bits: the seed's two 32-bit halves, xored, so every seed is taken
 * exactly and always draws the same stream (a seed below 2^32 is the state itself, which the committed
 * golden checkpoints depend on).
 */
export function uniformStream(seed: number | bigint): () => number {
  let state = seedState(seed);
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
}

/** The 32-bit state `uniformStream(seed)` starts from (the native engine's core draws the same stream from it). */
export function seedState(seed: number | bigint): number {
  return typeof seed === 'bigint' ? (Number(seed & 0xffffffffn) ^ Number((seed >> 32n) & 0xffffffffn)) >>> 0 : (seed ^ Math.floor(seed / 4294967296)) >>> 0;
}
