/**
 * The one place that opens a generation engine for a model definition: the native engine when the
 * definition asks for it (or runs on a GPU and the addon and the built directory allow it), else the
 * encoder-decoder engine for a directory with an encoder, else ONNX Runtime's decoder engine.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ModelDefinition } from '../../config/index.ts';
import { ChorusError } from '../../errors.ts';
import type { Engine, RequestMetrics } from '../core/engine.ts';
import { NativeEngine, nativeUnavailable } from './native-engine.ts';
import { OrtEngine } from './ort-engine.ts';
import { continuousCoreWanted, greedySearchWanted, nativeByDefault, rankGpus, runsOnGpu, type Placement } from './placement.ts';
import { Seq2SeqEngine } from './seq2seq-engine.ts';

export interface OpenEngineOptions {
  /** The model's name, for messages. */
  name: string;
  /** Notices (a GPU model served by the TypeScript engine, and why). */
  log: (line: string) => void;
  onRequestDone?: (metrics: RequestMetrics) => void;
}

/** An engine for one instance of `definition`, over the built model directory `dir`, on `placement`. */
export async function openEngine(definition: ModelDefinition, dir: string, placement: Placement, options: OpenEngineOptions): Promise<Engine> {
  const { name, onRequestDone } = options;
  const endIds = definition.end_ids === undefined ? {} : { endIds: definition.end_ids };
  const seq2seq = existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
  const native = nativeWanted(definition, dir, options.log);
  if (!native && definition.cuda_options !== undefined) {
    throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: cuda_options are passed by the native engine only (onnxruntime-node's own binding takes a device id alone); build it with npm run build:native`, { param: 'cuda_options' });
  }
  if (!native && definition.batch_invariant === true) {
    throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: batch_invariant needs the native engine (the TypeScript engine's steps take as many rows as run); build it with npm run build:native`, { param: 'batch_invariant' });
  }
  if (!native && definition.paged_cache === true) {
    throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: paged_cache is the native engine's; ${nativeUnavailable(dir) ?? 'native_engine is false'}`, { param: 'paged_cache' });
  }
  const tensorParallel = definition.tensor_parallel ?? 1;
  if (!native && tensorParallel > 1) {
    throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: tensor_parallel ${tensorParallel} runs on the native engine only; ${nativeUnavailable(dir) ?? 'native_engine is false'}`, { param: 'tensor_parallel' });
  }
  if (native) {
    const gpus = rankGpus(placement);
    return NativeEngine.open(dir, {
      provider: gpus.length === 0 ? 'cpu' : 'cuda',
      deviceId: gpus[0] ?? 0,
      ...(tensorParallel === 1 ? {} : { tensorParallel, rankDevices: gpus.slice(1) }),
      maxBatchSize: definition.max_batch_size,
      maxQueue: definition.max_queue,
      contextLength: definition.max_sequence_length,
      cudaGraph: definition.cuda_graph ?? true,
      continuous: continuousCoreWanted(definition, placement),
      batchInvariant: definition.batch_invariant ?? false,
      ...(definition.gpu_memory_utilization === undefined ? {} : { gpuMemoryUtilization: definition.gpu_memory_utilization }),
      ...(definition.paged_cache === undefined ? {} : { pagedCache: definition.paged_cache }),
      log: options.log,
      ...(definition.cuda_options === undefined ? {} : { cudaOptions: definition.cuda_options }),
      ...endIds,
      onRequestDone,
    });
  }
  if (seq2seq) return Seq2SeqEngine.open(dir, { executionProviders: placement, maxBatchSize: definition.max_batch_size, ...endIds, onRequestDone });
  return OrtEngine.open(dir, {
    executionProviders: placement,
    maxBatchSize: definition.max_batch_size,
    maxQueue: definition.max_queue,
    contextLength: definition.max_sequence_length,
    greedySearch: greedySearchWanted(definition),
    ...endIds,
    onRequestDone,
  });
}

/**
 * Whether a generate model runs on the native engine: when asked and the built directory allows it.
 * native_engine: true fails, saying why, when it cannot; the default falls back with a notice.
 */
function nativeWanted(definition: ModelDefinition, dir: string, log: (line: string) => void): boolean {
  if (definition.native_engine === false) return false;
  const unavailable = nativeUnavailable(dir);
  if (definition.native_engine === true) {
    if (unavailable !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', unavailable, { param: 'native_engine' });
    return true;
  }
  if (!runsOnGpu(definition) && !nativeByDefault(definition)) return false;
  if (unavailable !== undefined) log(`the TypeScript engine serves it: ${unavailable}`);
  return unavailable === undefined;
}
