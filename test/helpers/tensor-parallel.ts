/** Reading a tensor-parallel build back: each rank's graph, and its weights put back together. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import { makeCheckpoint, readSafetensors, writeSafetensors, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { rowsOf } from '../../src/modelbuild/tensor-slice.ts';
import { builtWeights } from './onnx-weights.ts';

export type Weights = ReturnType<typeof builtWeights>;
export type Weight = Weights extends Map<string, infer W> ? W : never;

/** Bytes per element of the ONNX data types the builds write. */
const WIDTH: Record<number, number> = { 1: 4, 10: 2, 16: 2, 7: 8 };

/** A tiny seeded checkpoint of `arch` in `dir`, its vocabulary cut to `vocab` rows when given (an odd one, as GPT-2's 50257). */
export function tinyCheckpoint(arch: CheckpointArch, dir: string, vocab?: number): string {
  const config = makeCheckpoint({ arch, size: 'tiny', seed: 7, out: dir });
  if (vocab === undefined) return dir;
  const file = join(dir, 'model.safetensors');
  const tensors = readSafetensors(file);
  for (const [key, tensor] of tensors) if (/(wte|embed_tokens|lm_head)\.weight$/.test(key)) tensors.set(key, { dims: [vocab, tensor.dims[1]!], data: rowsOf(tensor, { start: 0, count: vocab }).data });
  writeSafetensors(file, tensors);
  const ids = arch === 'gpt2' ? { bos_token_id: vocab - 1, eos_token_id: vocab - 1 } : {};
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify({ ...config, ...ids, vocab_size: vocab }, null, 2)}\n`);
  return dir;
}

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

/** The graph inputs every rank reads alike. */
const SHARED_INPUTS = new Set(['input_ids', 'position_ids', 'seqlens_k', 'total_sequence_length', 'block_table']);

/**
 * The ranks' decoders `model` of a build split in `n` as one ONNX model that runs on one device: each
 * rank's values prefixed `r<rank>:` (its past and present too), the shared inputs once, and the k-th
 * AllReduce of every rank replaced by one Sum of the ranks' inputs (AllGather: a Concat on the last
 * axis), nodes kept in order. Out: `logits` (rank 0's), each rank's `r<rank>:logits` and presents.
 * The weights are embedded, so the model stands alone.
 */
export function simulatedRanks(dir: string, n: number, model = 'decoder_model_slots.onnx'): Uint8Array {
  const graphs = Array.from({ length: n }, (_, r) => graphOf(dir, rankModel(n, r, model)));
  const name = (r: number, value: string): string => (value === '' || SHARED_INPUTS.has(value) ? value : `r${r}:${value}`);
  const collective = (node: onnxProto.onnx.INodeProto): boolean => node.domain === 'chorus' && (node.opType === 'AllReduce' || node.opType === 'AllGather');
  // Each rank's nodes cut at its collectives: segment k ends with collective k.
  const segments = graphs.map((graph) => {
    const out: onnxProto.onnx.INodeProto[][] = [[]];
    for (const node of graph.node ?? []) {
      out.at(-1)!.push(node);
      if (collective(node)) out.push([]);
    }
    return out;
  });
  const nodes: onnxProto.onnx.INodeProto[] = [];
  for (let k = 0; k < segments[0]!.length; k++) {
    for (let r = 0; r < n; r++) {
      for (const node of segments[r]![k]!) {
        if (collective(node)) continue;
        nodes.push({ ...node, name: `r${r}:${node.name}`, input: node.input!.map((v) => name(r, v)), output: node.output!.map((v) => name(r, v)) });
      }
    }
    const last = segments[0]![k]!.at(-1);
    if (last === undefined || !collective(last)) continue;
    const inputs = segments.map((s, r) => name(r, s[k]!.at(-1)!.input![0]!));
    const merged = `collective_${k}`;
    nodes.push(last.opType === 'AllReduce' ? { opType: 'Sum', name: merged, input: inputs, output: [merged] } : { opType: 'Concat', name: merged, input: inputs, output: [merged], attribute: [{ name: 'axis', type: onnxProto.onnx.AttributeProto.AttributeType.INT, i: -1 }] });
    segments.forEach((s, r) => nodes.push({ opType: 'Identity', name: `${merged}_r${r}`, input: [merged], output: [name(r, s[k]!.at(-1)!.output![0]!)] }));
  }
  const initializer = graphs.flatMap((graph, r) => {
    const weights = builtWeights(dir, rankModel(n, r, model));
    return (graph.initializer ?? []).map((t) => ({ name: name(r, t.name!), dims: t.dims, dataType: t.dataType, rawData: weights.get(t.name!)!.bytes }));
  });
  const input = graphs.flatMap((graph, r) => (graph.input ?? []).filter((v) => r === 0 || !SHARED_INPUTS.has(v.name!)).map((v) => ({ ...v, name: name(r, v.name!) })));
  const output = graphs.flatMap((graph, r) => (graph.output ?? []).map((v) => ({ ...v, name: name(r, v.name!) })));
  nodes.push({ opType: 'Identity', name: 'logits_of_rank0', input: ['r0:logits'], output: ['logits'] });
  output.push({ ...output.find((v) => v.name === 'r0:logits')!, name: 'logits' });
  const source = onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', rankModel(n, 0, model))));
  const merged = onnxProto.onnx.ModelProto.create({ irVersion: source.irVersion, opsetImport: source.opsetImport!.filter((o) => o.domain !== 'chorus'), graph: { name: 'ranks', node: nodes, initializer, input, output } });
  return onnxProto.onnx.ModelProto.encode(merged).finish();
}
