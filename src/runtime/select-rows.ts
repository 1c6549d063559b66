/** Picking rows of batch-major tensors (beam search's reorder, and spreading one row over beams). */
import ort from 'onnxruntime-node';
import type { Encoded, Seq2SeqCache } from './seq2seq-session.ts';

type RowData = Float32Array | Uint16Array | BigInt64Array | Int32Array | Uint8Array;

/** A new tensor whose row i is row `rows[i]` of `tensor` (rows along the first dimension; repeats allowed). */
export function selectRows(tensor: ort.Tensor, rows: readonly number[]): ort.Tensor {
  const data = tensor.data as RowData;
  const size = tensor.dims.slice(1).reduce((a, b) => a * b, 1);
  const out = new (data.constructor as new (length: number) => RowData)(rows.length * size);
  rows.forEach((row, i) => {
    (out as Float32Array).set((data as Float32Array).subarray(row * size, (row + 1) * size), i * size);
  });
  return new ort.Tensor(tensor.type, out, [rows.length, ...tensor.dims.slice(1)]);
}

/**
 * An encoder-decoder's caches with only `rows`. `decoder`: only the self-attention cache moves; the
 * cross-attention one stays as it is, which is right when every new row r reads the same encoder row
 * as old row r did (beams of one request share their encoder row, so reordering them moves nothing
 * there), and saves copying the larger cache every beam step.
 */
export function selectCacheRows(cache: Seq2SeqCache, rows: readonly number[], parts: 'all' | 'decoder' = 'all'): Seq2SeqCache {
  const select = (name: string, tensor: ort.Tensor): ort.Tensor => (parts === 'decoder' && name.includes('.encoder.') ? tensor : selectRows(tensor, rows));
  return { length: cache.length, tensors: Object.fromEntries(Object.entries(cache.tensors).map(([name, tensor]) => [name, select(name, tensor)])) };
}

/** The encoder's output with only `rows` (its attentions, not used by decoding, are dropped). */
export function selectEncodedRows(encoded: Encoded, rows: readonly number[]): Encoded {
  return { hidden: selectRows(encoded.hidden, rows), mask: rows.map((row) => encoded.mask[row]!), attentions: [] };
}
