/** How a batch of encode or forward requests runs on one session: together, and each its own rows back. */
import type ort from 'onnxruntime-node';
import type { EncodeRequest, EncodeResult } from './model-store.ts';
import { fromOrt, toOrt } from './ort-tensors.ts';
import type { TensorRecord } from './steps/step.ts';
import type { Seq2SeqSession } from '../runtime/index.ts';
import { floatData } from '../util/half.ts';

/**
 * Runs requests together: concatenated along the batch dimension when every input has the same
 * trailing shape in all of them, else one after another; each gets its own rows back.
 */
export async function forwardBatch(session: ort.InferenceSession, requests: TensorRecord[]): Promise<TensorRecord[]> {
  const run = async (inputs: TensorRecord): Promise<TensorRecord> => {
    const feeds = Object.fromEntries(Object.entries(inputs).map(([port, t]) => [port, toOrt(t, port)]));
    const out = await session.run(feeds);
    return Object.fromEntries(Object.entries(out).map(([port, t]) => [port, fromOrt(t)]));
  };
  const names = Object.keys(requests[0]!);
  const stackable = requests.length > 1 && names.every((n) => requests.every((r) => r[n] !== undefined && r[n].datatype === requests[0]![n]!.datatype && r[n].shape.slice(1).join() === requests[0]![n]!.shape.slice(1).join()));
  if (!stackable) {
    const outputs: TensorRecord[] = [];
    for (const r of requests) outputs.push(await run(r));
    return outputs;
  }
  const merged = Object.fromEntries(
    names.map((n) => {
      const first = requests[0]![n]!;
      return [n, { datatype: first.datatype, shape: [requests.reduce((sum, r) => sum + r[n]!.shape[0]!, 0), ...first.shape.slice(1)], data: requests.flatMap((r) => r[n]!.data) }];
    }),
  ) as TensorRecord;
  const out = await run(merged);
  let row = 0;
  return requests.map((r) => {
    const rows = r[names[0]!]!.shape[0]!;
    const mine = Object.fromEntries(
      Object.entries(out).map(([port, t]) => {
        const size = t.shape.slice(1).reduce((a, b) => a * b, 1);
        return [port, { datatype: t.datatype, shape: [rows, ...t.shape.slice(1)], data: t.data.slice(row * size, (row + rows) * size) }];
      }),
    ) as TensorRecord;
    row += rows;
    return mine;
  });
}

/** Runs requests as one padded batch and gives each its own rows back, at its own width. */
export async function encodeBatch(session: Seq2SeqSession, requests: EncodeRequest[]): Promise<EncodeResult[]> {
  const width = Math.max(...requests.map((r) => Math.max(0, ...r.ids.map((row) => row.length))));
  const ids = requests.flatMap((r) => r.ids.map((row) => [...row, ...Array<number>(width - row.length).fill(0)]));
  const masks = requests.flatMap((r) => r.lengths.map((length) => Array.from({ length: width }, (_, i) => (i < length ? 1 : 0))));
  const encoded = await session.encode(ids, masks);
  // An fp16 build's hidden states are widened to float32 here, once.
  const hidden = floatData(encoded.hidden);
  const d = encoded.hidden.dims[2]!;
  let row = 0;
  return requests.map((request) => {
    const w = Math.max(0, ...request.ids.map((r) => r.length));
    const rows = request.ids.length;
    const out = new Float32Array(rows * w * d);
    for (let r = 0; r < rows; r++) out.set(hidden.subarray((row + r) * width * d, ((row + r) * width + w) * d), r * w * d);
    const attentions = encoded.attentions.map((layer) => {
      const heads = layer.dims[1]!;
      const data = new Float32Array(rows * heads * w * w);
      const source = floatData(layer);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < heads; h++) {
          for (let q = 0; q < w; q++) {
            const from = (((row + r) * heads + h) * width + q) * width;
            data.set(source.subarray(from, from + w), ((r * heads + h) * w + q) * w);
          }
        }
      }
      return { data, dims: [rows, heads, w, w] as [number, number, number, number] };
    });
    row += rows;
    return { hidden: out, dims: [rows, w, d] as [number, number, number], attentions };
  });
}
