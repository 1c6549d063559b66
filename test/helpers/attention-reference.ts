/**
 * A plain reference of the decoder attention operators (DecoderSlotAttention and PagedAttention, see
 * src/native/slot-attention.h and paged-attention.h) on float32 arrays: each new token's key and value
 * (biased, the key rotated) written at its position, then each query over the keys its window allows,
 * scores scaled, soft-capped and softmaxed in float64.
 */
import type { NativeAttentionCall } from '../../src/native/index.ts';

/** A float32 call (its float arrays Float32Arrays). */
export type Float32Call = NativeAttentionCall & {
  qkv: Float32Array;
  key: Float32Array;
  value: Float32Array;
  bias?: Float32Array;
  cos?: Float32Array;
  sin?: Float32Array;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
};

/** The first key a query at `position` attends with a window (0: none). */
export function firstKey(position: number, window: number): number {
  return window > 0 ? Math.max(0, position - window + 1) : 0;
}

/** Where position j of row r's key head k starts in the call's caches. */
export function cacheAt(c: NativeAttentionCall, r: number, k: number, j: number): number {
  if (c.op === 'slot') return ((r * c.kvHeads + k) * c.capacity! + j) * c.dim;
  const block = c.blockTable === undefined ? r : c.blockTable[r * c.maxBlocks! + Math.floor(j / c.blockSize!)]!;
  return ((block * c.kvHeads + k) * c.blockSize! + (j % c.blockSize!)) * c.dim;
}

/**
 * Head `head` (counted over q, k and v) of token row y, biased, normed (q and k heads, when the call has
 * norms) and rotated at `position` when rotate (each step rounded to float32).
 */
function headOf(c: Float32Call, y: number, head: number, position: number, rotate: boolean): number[] {
  const width = (c.heads + 2 * c.kvHeads) * c.dim;
  const biased = Array.from({ length: c.dim }, (_, d) => {
    const value = c.qkv[y * width + head * c.dim + d]!;
    return c.bias === undefined ? value : Math.fround(value + c.bias[head * c.dim + d]!);
  });
  const norm = head < c.heads ? c.qNorm : head < c.heads + c.kvHeads ? c.kNorm : undefined;
  const inverse = 1 / Math.sqrt(biased.reduce((sum, v) => sum + v * v, 0) / c.dim + (c.epsilon ?? 1e-6));
  const x = norm === undefined ? biased : biased.map((v, d) => Math.fround(v * inverse * norm[d]!));
  if (!rotate || c.cos === undefined) return x;
  const half = c.dim / 2;
  return x.map((v, d) => {
    const cos = c.cos![position * half + (d % half)]!;
    const sin = c.sin![position * half + (d % half)]!;
    return Math.fround(d < half ? v * cos - x[d + half]! * sin : v * cos + x[d - half]! * sin);
  });
}

/** The call's output [rows, tokens, heads * dim], and its caches written (copies of the call's). */
export function referenceAttention(c: Float32Call): { output: Float64Array; key: Float32Array; value: Float32Array } {
  const key = Float32Array.from(c.key);
  const value = Float32Array.from(c.value);
  const positionOf = (r: number, s: number): number => c.seqlens[r]! + 1 - c.tokens + s;
  for (let r = 0; r < c.rows; r++) {
    for (let s = 0; s < c.tokens; s++) {
      const y = r * c.tokens + s;
      for (let k = 0; k < c.kvHeads; k++) {
        const at = cacheAt(c, r, k, positionOf(r, s));
        key.set(headOf(c, y, c.heads + k, positionOf(r, s), true), at);
        value.set(headOf(c, y, c.heads + c.kvHeads + k, positionOf(r, s), false), at);
      }
    }
  }
  const output = new Float64Array(c.rows * c.tokens * c.heads * c.dim);
  const group = c.heads / c.kvHeads;
  const softcap = c.softcap ?? 0;
  for (let r = 0; r < c.rows; r++) {
    for (let s = 0; s < c.tokens; s++) {
      const y = r * c.tokens + s;
      const position = positionOf(r, s);
      const first = firstKey(position, c.slidingWindow ?? 0);
      for (let h = 0; h < c.heads; h++) {
        const k = Math.floor(h / group);
        const q = headOf(c, y, h, position, true);
        const scores: number[] = [];
        for (let j = first; j <= position; j++) {
          const at = cacheAt(c, r, k, j);
          let score = q.reduce((sum, x, d) => sum + x * key[at + d]!, 0) * (c.scale ?? 1);
          if (softcap > 0) score = softcap * Math.tanh(score / softcap);
          scores.push(score);
        }
        const highest = Math.max(...scores);
        const weights = scores.map((x) => Math.exp(x - highest));
        const total = weights.reduce((a, b) => a + b, 0);
        for (let j = first; j <= position; j++) {
          const at = cacheAt(c, r, k, j);
          const p = weights[j - first]! / total;
          for (let d = 0; d < c.dim; d++) output[(y * c.heads + h) * c.dim + d]! += p * value[at + d]!;
        }
      }
    }
  }
  return { output, key, value };
}
