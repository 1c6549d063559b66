/**
 * How the native engine plans its cache against the GPU's memory: the weights it will load, the
 * activations it keeps room for, whether maxBatchSize whole slots fit beside them or the cache must
 * be paged, and the clear errors when the fraction asked for is not a fraction or the weights alone do
 * not fit.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../../errors.ts';

/** vLLM's default: the share of the GPU's memory the model (weights, activations and cache) may take. */
export const DEFAULT_GPU_MEMORY_UTILIZATION = 0.9;
/** The most prompt tokens a paged engine prefills in one run (longer prompts run alone). */
export const PAGED_PREFILL_TOKENS = 16384;

const GIB = 2 ** 30;

/** Bytes as GiB with two decimals. */
export function gib(bytes: number): string {
  return `${(bytes / GIB).toFixed(2)} GiB`;
}

/** `value` checked as gpu_memory_utilization: a number in (0, 1]. */
export function checkUtilization(value: number, param = 'gpu_memory_utilization'): number {
  if (typeof value !== 'number' || !(value > 0 && value <= 1)) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} must be a number in (0, 1], got ${String(value)}`, { param, value });
  }
  return value;
}

/** The bytes of a model's weights on the device: its .onnx file and the decoder's shared data file, when there is one. */
export function weightBytes(dir: string, modelFile: string): number {
  const size = (path: string): number => (existsSync(path) ? statSync(path).size : 0);
  return size(join(dir, 'onnx', modelFile)) + size(join(dir, 'onnx', 'decoder_model_merged.onnx_data'));
}

/** The decoder's shape as far as its memory goes. */
export interface MemoryShape {
  layers: number;
  kvHeads: number;
  headDim: number;
  heads: number;
  vocab: number;
  /** Bytes per element: 4 (fp32) or 2 (fp16, bf16). */
  element: number;
}

/** Cache bytes per token (every layer's key and value). */
export function tokenBytes(shape: MemoryShape): number {
  return 2 * shape.layers * shape.kvHeads * shape.headDim * shape.element;
}

/**
 * Activations kept out of the cache: a prefill of `prefillTokens` tokens (hidden states, the packed
 * q, k and v, an MLP of 4x the width taken three times over), every slot's logits and the sampler's
 * float32 copies, and 1 GiB for cuBLAS's workspaces, CUDA graphs and the allocator's slack.
 */
export function activationReserve(shape: MemoryShape, slots: number, prefillTokens: number): number {
  const hidden = shape.heads * shape.headDim;
  const perToken = (4 * hidden + (shape.heads + 2 * shape.kvHeads) * shape.headDim + 12 * hidden) * shape.element;
  return prefillTokens * perToken + slots * shape.vocab * (shape.element + 8) + GIB;
}

/**
 * Whether a cache of `slots` slots of `slotLength` tokens, with `extra` slots more, fits device
 * `deviceId` beside the slot decoder's weights and the activations (as pagedPlan counts them).
 */
export function slotsFit(
  gpuMemory: (device: number) => { free: number; total: number },
  dir: string,
  slotModel: string,
  deviceId: number,
  shape: MemoryShape,
  slots: number,
  extra: number,
  slotLength: number,
  utilization: number,
): boolean {
  const memory = gpuMemory(deviceId);
  return memory.total > 0 && cacheFits(weightBytes(dir, slotModel), activationReserve(shape, slots, Math.max(PAGED_PREFILL_TOKENS, slotLength)), slots + extra, slotLength, shape, memory, utilization);
}

/** Whether `slots` whole slots of `slotLength` tokens fit `memory` beside `weights` and the activations' `reserve`. */
function cacheFits(weights: number, reserve: number, slots: number, slotLength: number, shape: MemoryShape, memory: { free: number; total: number }, utilization: number): boolean {
  return weights + reserve + slots * slotLength * tokenBytes(shape) <= Math.min(memory.free, memory.total * utilization);
}

/** Fails, saying what is needed against what is free, when the weights and activations cannot fit the device. */
export function checkWeightsFit(weights: number, reserve: number, memory: { free: number; total: number }, utilization: number, deviceId: number): void {
  const allowed = Math.min(memory.free, memory.total * utilization);
  if (weights + reserve <= allowed) return;
  throw new ChorusError(
    'CHORUS_DEVICE_MEMORY',
    `the model needs ${gib(weights)} of weights and ${gib(reserve)} for activations on GPU ${deviceId}, which has ${gib(memory.free)} free of ${gib(memory.total)} (cudaMemGetInfo; gpu_memory_utilization ${utilization} allows ${gib(memory.total * utilization)}); use a GPU with more free memory, fp16 or bf16 weights, a smaller max_batch_size, or tensor_parallel to split the model over GPUs`,
    { param: 'gpu_memory_utilization' },
  );
}

/** The native engine's options that choose and size a paged cache. */
export interface PagingOptions {
  provider?: 'cpu' | 'cuda';
  /**
   * The slot decoder's attention would run on the host (ONNX Runtime's GroupQueryAttention in fp32):
   * 'auto' then takes the paged decoder where it is built, whose attention is the addon's on the GPU.
   */
  slotAttentionOnHost?: boolean;
  deviceId?: number;
  pagedCache?: boolean | 'auto';
  blockSize?: number;
  cacheBlocks?: number;
}

/** What the addon's SlotDecoder takes for a paged cache. */
export interface PagedDecoderOptions {
  blockSize: number;
  blocks?: number;
  memoryUtilization: number;
  reserveBytes: number;
}

/** A tensor-parallel model's ranks, as the plan checks them: each rank's GPU and weights (by model file). */
export interface PlannedRanks {
  n: number;
  /** CUDA: each rank's GPU. */
  devices: number[];
  weights: (file: string) => number[];
}

/**
 * Whether the engine pages its cache, and how: on CUDA the weights (and the activations' reserve)
 * must fit what the GPU has (with `ranks`, each rank's share on its own GPU), else it fails saying so;
 * 'auto' pages there when `slots` whole slots would not fit beside them, for a split model, and where
 * the slot decoder's attention would run on the host. Undefined: a cache of whole slots.
 */
export function pagedPlan(
  gpuMemory: (device: number) => { free: number; total: number },
  dir: string,
  pagedModel: string,
  slotModel: string,
  options: PagingOptions,
  shape: MemoryShape,
  slots: number,
  slotLength: number,
  utilization: number,
  ranks?: PlannedRanks,
): PagedDecoderOptions | undefined {
  const wanted = options.pagedCache ?? 'auto';
  if (wanted !== true && wanted !== false && wanted !== 'auto') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `pagedCache must be true, false or 'auto', got ${String(wanted)}`, { param: 'pagedCache' });
  const built = existsSync(join(dir, 'onnx', ranks === undefined ? pagedModel : join(`tp${ranks.n}`, 'rank0', pagedModel)));
  if (wanted === true && !built) throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} has no paged decoder (onnx/${pagedModel}); rebuild it with chorus build --flavor cuda --slot-decoder`, { param: 'pagedCache' });
  const blockSize = options.blockSize ?? 16;
  if (!Number.isInteger(blockSize) || blockSize < 1 || blockSize > 1024) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `blockSize must be an integer from 1 to 1024, got ${blockSize}`, { param: 'blockSize' });
  if (options.cacheBlocks !== undefined && (!Number.isInteger(options.cacheBlocks) || options.cacheBlocks < 2)) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `cacheBlocks must be an integer of at least 2 (one is kept aside), got ${options.cacheBlocks}`, { param: 'cacheBlocks' });
  }
  const paging = wanted === true || (wanted === 'auto' && built);
  let reserve = 0;
  if (options.provider === 'cuda') {
    const model = paging ? pagedModel : slotModel;
    const devices = ranks?.devices ?? [options.deviceId ?? 0];
    const weights = ranks?.weights(model) ?? [weightBytes(dir, model)];
    reserve = activationReserve(shape, slots, Math.max(PAGED_PREFILL_TOKENS, slotLength));
    let wholeSlotsFit = true;
    for (const [r, deviceId] of devices.entries()) {
      const memory = gpuMemory(deviceId);
      // An addon without CUDA knows no device: opening the decoder says so.
      if (memory.total === 0) return undefined;
      checkWeightsFit(weights[r]!, reserve, memory, utilization, deviceId);
      wholeSlotsFit &&= cacheFits(weights[r]!, reserve, slots, slotLength, shape, memory, utilization);
    }
    // A split model takes the paged decoder where it is built: its PagedAttention is the addon's own on
    // every rank, where the slot decoder's GroupQueryAttention was seen failing on the ranks past GPU 0
    // (ONNX Runtime's XQA kernel, set up for one device per process; slot-decoder.cc keeps it to one).
    if (!paging || (wanted === 'auto' && wholeSlotsFit && ranks === undefined && options.slotAttentionOnHost !== true)) return undefined;
  } else if (wanted !== true) {
    return undefined;
  }
  return { blockSize, ...(options.cacheBlocks === undefined ? {} : { blocks: options.cacheBlocks }), memoryUtilization: utilization, reserveBytes: reserve };
}
