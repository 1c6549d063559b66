/** The weights a build wrote: every initializer of a model, its bytes read from the model or its external data. */
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { dirname, join } from 'node:path';
import onnxProto from 'onnx-proto';

/** Initializers of `<dir>/onnx/<model>` by name: data type, dims and bytes (copied out of the message). */
export function builtWeights(dir: string, model = 'decoder_model_merged.onnx'): Map<string, { dataType: number; dims: number[]; bytes: Buffer }> {
  const graph = onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', model))).graph!;
  const weights = new Map<string, { dataType: number; dims: number[]; bytes: Buffer }>();
  for (const tensor of graph.initializer ?? []) {
    let bytes: Buffer;
    if ((tensor.externalData?.length ?? 0) === 0) bytes = Buffer.from(tensor.rawData ?? new Uint8Array(0));
    else {
      const field = (key: string): string => tensor.externalData!.find((e) => e.key === key)!.value!;
      bytes = Buffer.alloc(Number(field('length')));
      const fd = openSync(join(dir, 'onnx', dirname(model), field('location')), 'r');
      try {
        readSync(fd, bytes, 0, bytes.length, Number(field('offset')));
      } finally {
        closeSync(fd);
      }
    }
    weights.set(tensor.name!, { dataType: tensor.dataType!, dims: (tensor.dims ?? []).map(Number), bytes });
  }
  return weights;
}
