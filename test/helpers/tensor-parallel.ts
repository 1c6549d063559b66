/** Reading a tensor-parallel build back: each rank's graph, and its weights put back together. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import type { builtWeights } from './onnx-weights.ts';

export type Weights = ReturnType<typeof builtWeights>;
export type Weight = Weights extends Map<string, infer W> ? W : never;

/** Bytes per element of the ONNX data types the builds write. */
const WIDTH: Record<number, number> = { 1: 4, 10: 2, 16: 2, 7: 8 };

/** Rank `rank`'s model `model` of a build split in `n`. */
export function rankModel(n: number, rank: number, model = 'decoder_model_slots.onnx'): string {
  return `tp${n}/rank${rank}/${model}`;
}

/** The graph of `<dir>/onnx/<model>`. */
export function graphOf(dir: string, model: string): onnxProto.onnx.IGraphProto {
  return onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', model))).graph!;
}

/** An integer attribute of a node. */
export function intAttribute(node: onnxProto.onnx.INodeProto, name: string): number | undefined {
  const a = node.attribute?.find((x) => x.name === name);
  return a === undefined ? undefined : Number(a.i);
}

/** Weights concatenated along `axis` (0 or the last) in order. */
export function concat(parts: Weight[], axis: 0 | -1): Weight {
  const dims = parts[0]!.dims;
  const width = WIDTH[parts[0]!.dataType]!;
  if (axis === 0 || dims.length === 1) {
    const rows = parts.reduce((sum, p) => sum + p.dims[0]!, 0);
    return { dataType: parts[0]!.dataType, dims: [rows, ...dims.slice(1)], bytes: Buffer.concat(parts.map((p) => p.bytes)) };
  }
  const rows = dims[0]!;
  const rowBytes = parts.map((p) => p.dims[1]! * width);
  const out = Buffer.alloc(rows * rowBytes.reduce((a, b) => a + b, 0));
  let at = 0;
  for (let r = 0; r < rows; r++) {
    parts.forEach((p, i) => {
      p.bytes.copy(out, at, r * rowBytes[i]!, (r + 1) * rowBytes[i]!);
      at += rowBytes[i]!;
    });
  }
  return { dataType: parts[0]!.dataType, dims: [rows, parts.reduce((sum, p) => sum + p.dims[1]!, 0)], bytes: out };
}

/** Columns [start, start + count) of a 2-D weight. */
export function columnBlock(w: Weight, start: number, count: number): Weight {
  const width = WIDTH[w.dataType]!;
  const [rows, cols] = w.dims as [number, number];
  const out = Buffer.alloc(rows * count * width);
  for (let r = 0; r < rows; r++) w.bytes.copy(out, r * count * width, (r * cols + start) * width, (r * cols + start + count) * width);
  return { dataType: w.dataType, dims: [rows, count], bytes: out };
}

/** The first `rows` rows of a 2-D weight. */
export function firstRows(w: Weight, rows: number): Weight {
  const rowBytes = (w.bytes.length / w.dims[0]!) | 0;
  return { dataType: w.dataType, dims: [rows, ...w.dims.slice(1)], bytes: w.bytes.subarray(0, rows * rowBytes) };
}
