/**
 * `chorus doctor --model <dir>`: how a built model splits a device's memory between its weights and
 * the key/value cache: the weights' bytes (and how they are stored: float, or quantized projections),
 * the cache's bytes per token, and, with a GPU, how many tokens of cache fit beside the weights at the
 * default gpu_memory_utilization (what the paged cache gets; quantized weights leave it more).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { bytesText } from '../modelbuild/index.ts';
import { activationReserve, DEFAULT_GPU_MEMORY_UTILIZATION, gib, tokenBytes, weightBytes, type MemoryShape } from '../generation/engines/native-memory.ts';

interface Built {
  dtype: 'fp32' | 'fp16' | 'bf16';
  spec: { numLayers?: number; numKvHeads?: number; numHeads?: number; headDim: number; vocabSize: number };
  weights?: { weights: string; bits: number; groupSize: number | 'channel'; head: boolean };
  tensor_parallel?: number;
}

const MODELS = ['decoder_model_paged.onnx', 'decoder_model_slots.onnx', 'decoder_model_merged.onnx'];

/** The lines `doctor --model` prints for `dir`; `gpu`: the free and total memory of GPU 0, when there is one. */
export function modelMemoryLines(dir: string, gpu: { free: number; total: number } | undefined): string[] {
  const file = join(dir, 'chorus_build.json');
  if (!existsSync(dir)) throw new ChorusError('CHORUS_FILE_MISSING', `--model ${dir} does not exist`, { param: '--model' });
  if (!existsSync(file)) throw new ChorusError('CHORUS_FILE_MISSING', `--model ${dir} has no chorus_build.json; give a directory chorus build wrote`, { param: '--model' });
  const built = JSON.parse(readFileSync(file, 'utf8')) as Built;
  if ((built.tensor_parallel ?? 1) > 1) return rankMemoryLines(dir, built, built.tensor_parallel!);
  const model = MODELS.find((m) => existsSync(join(dir, 'onnx', m))) ?? MODELS[2]!;
  const weights = weightBytes(dir, model);
  const q = built.weights;
  const how = q === undefined ? `${built.dtype} weights` : `${q.weights} projections (${q.groupSize === 'channel' ? 'per output channel' : `groups of ${q.groupSize}`}), LM head ${q.head ? 'quantized' : built.dtype}, ${built.dtype} activations`;
  const shape: MemoryShape = {
    layers: built.spec.numLayers ?? 0,
    kvHeads: built.spec.numKvHeads ?? built.spec.numHeads ?? 0,
    headDim: built.spec.headDim,
    heads: built.spec.numHeads ?? 0,
    vocab: built.spec.vocabSize,
    element: built.dtype === 'fp32' ? 4 : 2,
  };
  const perToken = tokenBytes(shape);
  const lines = [`model ${dir}: weights ${bytesText(weights)} (${how}); key/value cache ${(perToken / 1024).toFixed(1)} KiB a token`];
  if (gpu !== undefined && gpu.total > 0 && perToken > 0) {
    const room = Math.min(gpu.free, gpu.total * DEFAULT_GPU_MEMORY_UTILIZATION) - weights - activationReserve(shape, 1, 16384);
    lines.push(`  GPU 0: ${gib(gpu.total)}, ${gib(gpu.free)} free: ${room > 0 ? `after the weights and activations, about ${Math.floor(room / perToken)} tokens of cache (${gib(room)})` : 'the weights and activations do not fit'}`);
  }
  return lines;
}

/** A build split over N GPUs: each rank's weights (its decoder and data file) and its share of the cache. */
function rankMemoryLines(dir: string, built: Built, n: number): string[] {
  const size = (path: string): number => (existsSync(path) ? statSync(path).size : 0);
  const heads = built.spec.numHeads ?? 0;
  const kvHeads = built.spec.numKvHeads ?? heads;
  // Key/value heads split when they divide by N; else each rank keeps the one its query heads share.
  const rankKv = kvHeads % n === 0 ? kvHeads / n : 1;
  const perToken = 2 * (built.spec.numLayers ?? 0) * rankKv * built.spec.headDim * (built.dtype === 'fp32' ? 4 : 2);
  const ranks = Array.from({ length: n }, (_, r) => {
    const rankDir = join(dir, 'onnx', `tp${n}`, `rank${r}`);
    return `rank ${r} ${bytesText(size(join(rankDir, 'decoder_model_slots.onnx')) + size(join(rankDir, 'decoder_model_slots.onnx_data')))}`;
  });
  return [`model ${dir}: split over ${n} GPUs (tensor_parallel ${n}), ${built.dtype} weights: ${ranks.join(', ')}; key/value cache ${(perToken / 1024).toFixed(1)} KiB a token on each GPU`];
}
