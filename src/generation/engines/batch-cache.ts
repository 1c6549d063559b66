/**
 * The running batch's key/value cache on the host: for each cache tensor, [rows, heads, length, headDim]
 * with every row's tokens right-aligned (padding on the left, masked out by each row's attention mask).
 * It is rebuilt only when the batch's membership changes: `merge` when sequences join, `gather` when
 * they leave. Between those, each decode step's output simply becomes the next step's input.
 */

/** A float32 or float16 (as bits) cache tensor's data. */
export type CacheData = Float32Array | Uint16Array;

/** One batch's cache: tensors by input name, and each row's attention mask over its `length` columns. */
export interface BatchCache {
  tensors: Map<string, CacheData>;
  heads: number;
  headDim: number;
  /** Columns (tokens) per row, padding included. */
  length: number;
  /** One 0/1 mask per row, `length` long. */
  masks: number[][];
}

function allocate(like: CacheData, size: number): CacheData {
  return like instanceof Float32Array ? new Float32Array(size) : new Uint16Array(size);
}

/** Copies `rows` of `from` (with its length) into `to` (with `length` >= it), right-aligned, starting at row `at`. */
function copyRows(from: CacheData, fromLength: number, to: CacheData, length: number, rows: readonly number[], at: number, heads: number, headDim: number): void {
  const shift = length - fromLength;
  rows.forEach((row, i) => {
    for (let h = 0; h < heads; h++) {
      const src = ((row * heads + h) * fromLength) * headDim;
      const dst = (((at + i) * heads + h) * length + shift) * headDim;
      to.set(from.subarray(src, src + fromLength * headDim), dst);
    }
  });
}

/** The rows of `a` then those of `b`, padded on the left to the longer length. */
export function mergeCaches(a: BatchCache, b: BatchCache): BatchCache {
  const length = Math.max(a.length, b.length);
  const rowsA = a.masks.length;
  const rowsB = b.masks.length;
  const tensors = new Map<string, CacheData>();
  for (const [name, dataA] of a.tensors) {
    const out = allocate(dataA, (rowsA + rowsB) * a.heads * length * a.headDim);
    copyRows(dataA, a.length, out, length, [...Array(rowsA).keys()], 0, a.heads, a.headDim);
    copyRows(b.tensors.get(name)!, b.length, out, length, [...Array(rowsB).keys()], rowsA, a.heads, a.headDim);
    tensors.set(name, out);
  }
  const pad = (mask: number[]): number[] => [...Array<number>(length - mask.length).fill(0), ...mask];
  return { tensors, heads: a.heads, headDim: a.headDim, length, masks: [...a.masks.map(pad), ...b.masks.map(pad)] };
}

/** Only the rows `keep` (in that order), dropping leading columns that are padding in every kept row. */
export function gatherRows(cache: BatchCache, keep: readonly number[]): BatchCache {
  const masks = keep.map((row) => cache.masks[row]!);
  let trim = 0;
  while (trim < cache.length && masks.every((mask) => mask[trim] === 0)) trim++;
  const length = cache.length - trim;
  const tensors = new Map<string, CacheData>();
  for (const [name, data] of cache.tensors) {
    const out = allocate(data, keep.length * cache.heads * length * cache.headDim);
    keep.forEach((row, i) => {
      for (let h = 0; h < cache.heads; h++) {
        const src = ((row * cache.heads + h) * cache.length + trim) * cache.headDim;
        out.set(data.subarray(src, src + length * cache.headDim), ((i * cache.heads + h) * length) * cache.headDim);
      }
    });
    tensors.set(name, out);
  }
  return { tensors, heads: cache.heads, headDim: cache.headDim, length, masks: masks.map((mask) => mask.slice(trim)) };
}
