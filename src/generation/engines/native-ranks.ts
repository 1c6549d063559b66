/**
 * A tensor-parallel model on the native engine: a build split over N ranks (onnx/tp{N}/rank{r}/, each
 * rank's decoders with its own weights) runs as one SlotDecoder whose rank 0 owns the others. On CUDA
 * rank r runs on the r-th GPU of its instance (each rank a GPU of its own, over NCCL); on the CPU the
 * ranks are threads of this process. Here: the layout checked against the build and the host, each
 * rank's files and weights, and the load log's line of each GPU's share.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../../errors.ts';
import { gib } from './native-memory.ts';

/** A model split over `n` ranks, as the engine opens it. */
export interface RankLayout {
  n: number;
  /** Rank r's CUDA device (CPU: none). */
  devices: number[];
  /** The KV heads each rank's cache holds: a share when they divide by n, else the one its query heads share. */
  kvHeads: number;
}

/** The path under onnx/ of rank r's model `file` of a build split in n (n = 1: the unsplit model). */
export function rankFile(n: number, rank: number, file: string): string {
  return n === 1 ? file : join(`tp${n}`, `rank${rank}`, file);
}

/** The bytes of rank r's weights for model `file`: the model and its rank's data file. */
export function rankWeightBytes(dir: string, n: number, rank: number, file: string): number {
  const size = (path: string): number => (existsSync(path) ? statSync(path).size : 0);
  const onnx = join(dir, 'onnx');
  return size(join(onnx, rankFile(n, rank, file))) + size(join(onnx, rankFile(n, rank, 'decoder_model_slots.onnx_data')));
}

/** Every rank's bytes of weights for model `file`, rank 0's first. */
export function rankWeights(dir: string, n: number, file: string): number[] {
  return Array.from({ length: n }, (_, r) => rankWeightBytes(dir, n, r, file));
}

/**
 * The layout of `n` ranks over the build in `dir` (built split in `built`, 1 when not): refused by
 * name when the build is another split, or on CUDA when the instance lists other than n GPUs, one
 * twice, or one this host does not have.
 */
export function rankLayout(dir: string, n: number, built: number, kv: { numHeads: number; numKvHeads: number }, cuda: { devices: number[]; count: number } | undefined): RankLayout {
  if (!Number.isInteger(n) || n < 1) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `tensor_parallel must be an integer of at least 1, got ${n}`, { param: 'tensor_parallel', value: n });
  if (built !== n) {
    const how = built === 1 ? 'unsplit' : `split over ${built} ranks`;
    throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} is built ${how}, and the model asks for tensor_parallel ${n}; build it with tensor_parallel: ${n}`, { param: 'tensor_parallel', value: n });
  }
  for (let r = 0; r < n && n > 1; r++) {
    const file = join(dir, 'onnx', rankFile(n, r, 'decoder_model_slots.onnx'));
    if (!existsSync(file)) throw new ChorusError('CHORUS_FILE_MISSING', `tensor_parallel ${n}: rank ${r}'s decoder ${file} is missing; build the model again`, { param: 'tensor_parallel' });
  }
  const devices = cuda?.devices ?? [];
  // One rank: the decoder itself says when its GPU is missing.
  if (cuda !== undefined && n > 1) {
    if (devices.length !== n) throw new ChorusError('CHORUS_CONFIG_INVALID', `tensor_parallel ${n} runs each instance on ${n} GPUs, and this one was given ${devices.length} (${devices.join(', ')})`, { param: 'instance_group' });
    devices.forEach((gpu, r) => {
      if (gpu >= cuda.count) {
        throw new ChorusError('CHORUS_UNSUPPORTED', `tensor_parallel ${n} puts rank ${r} on GPU ${gpu}, and this host has ${cuda.count} GPU${cuda.count === 1 ? '' : 's'}; list ${n} GPUs per instance in instance_group.gpus`, { param: 'instance_group' });
      }
      if (devices.indexOf(gpu) !== r) throw new ChorusError('CHORUS_CONFIG_INVALID', `tensor_parallel ${n}: ranks ${devices.indexOf(gpu)} and ${r} are both on GPU ${gpu}; each rank needs a GPU of its own`, { param: 'instance_group' });
    });
  }
  const kvHeads = kv.numKvHeads % n === 0 ? kv.numKvHeads / n : 1;
  return { n, devices, kvHeads };
}

/** The load log's line of each rank's share: its weights and cache, on which GPU (or CPU thread). */
export function rankShares(dir: string, layout: RankLayout, file: string, cacheBytes: number[]): string {
  const weights = rankWeights(dir, layout.n, file);
  const shares = cacheBytes.map((cache, r) => {
    const where = layout.devices.length > 0 ? `GPU ${layout.devices[r]}` : `CPU rank ${r}`;
    return `${where} ${gib(weights[r] ?? 0)} of weights and ${gib(cache)} of cache`;
  });
  return `tensor_parallel ${layout.n}: ${shares.join('; ')}`;
}
