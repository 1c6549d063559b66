/**
 * Where a model's instances run and which engine serves them, read from its definition: one execution
 * provider list per instance (`instance_group` counts on cpu or on each listed GPU; else one on
 * `device`), GreedySearch and the native engine by default on GPUs. A tensor-parallel model
 * (tensor_parallel: N) takes its GPUs N at a time: instance k of a group runs its ranks on gpus[k * N]
 * .. gpus[k * N + N - 1] (without gpus, on the model's GPU and the N - 1 after it), and its list names
 * a CUDA provider per rank, rank 0's first.
 */
import type { ModelDefinition } from '../../config/index.ts';
import { ChorusError } from '../../errors.ts';
import { loadNative } from '../../native/index.ts';
import type { ExecutionProviders } from '../../runtime/index.ts';

/** One instance's execution providers. */
export type Placement = ExecutionProviders;

export function instancePlacements(value: ModelDefinition): Placement[] {
  const device = value.device ?? 'cpu';
  const n = value.tensor_parallel ?? 1;
  const defaultGpu = device.startsWith('cuda') ? Number(device.split(':')[1] ?? 0) : 0;
  const defaultGpus = Array.from({ length: n }, (_, r) => defaultGpu + r);
  const on = (kind: 'cpu' | 'gpu', gpus: number[]): Placement => (kind === 'cpu' ? ['cpu'] : gpus.map((gpu) => ({ name: 'cuda', deviceId: gpu })));
  const defaultKind = device === 'cpu' ? 'cpu' : 'gpu';
  if (value.instance_group === undefined) return [on(defaultKind, defaultGpus)];
  return value.instance_group.flatMap((group, index) => {
    const kind = group.kind ?? defaultKind;
    const gpus = kind === 'gpu' ? (group.gpus ?? (n === 1 ? [defaultGpu] : defaultGpus)) : Array.from({ length: n }, () => 0);
    if (gpus.length % n !== 0) {
      throw new ChorusError('CHORUS_CONFIG_INVALID', `tensor_parallel ${n} runs each instance on ${n} GPUs, and instance_group[${index}].gpus lists ${gpus.length} (${gpus.join(', ')}): list a multiple of ${n}`, { param: 'instance_group' });
    }
    return Array.from({ length: gpus.length / n }, (_, k) => gpus.slice(k * n, (k + 1) * n)).flatMap((set) => Array.from({ length: group.count ?? 1 }, () => on(kind, set)));
  });
}

/** The GPUs of an instance's ranks, rank 0's first (its CUDA providers); empty on the CPU. */
export function rankGpus(placement: Placement): number[] {
  return placement.flatMap((p) => ((typeof p === 'string' ? p : p.name) === 'cuda' ? [typeof p === 'string' ? 0 : ((p as { deviceId?: number }).deviceId ?? 0)] : []));
}

/** Whether any instance of the model runs on a GPU. */
export function runsOnGpu(value: ModelDefinition): boolean {
  return instancePlacements(value).some((placement) => gpuOf(placement) !== undefined);
}

/** The CUDA provider of an instance's list, if it has one. */
export function gpuOf(placement: Placement): { deviceId?: number } | undefined {
  for (const p of placement) if ((typeof p === 'string' ? p : p.name) === 'cuda') return typeof p === 'string' ? {} : (p as { deviceId?: number });
  return undefined;
}

/**
 * continuous_core, defaulting to true for an instance on a GPU (where a step waiting on the event loop
 * leaves the device idle) and false on the CPU.
 */
export function continuousCoreWanted(value: ModelDefinition, placement: Placement): boolean {
  return value.continuous_core ?? gpuOf(placement) !== undefined;
}

/** greedy_search, defaulting to true on GPUs. */
export function greedySearchWanted(value: ModelDefinition): boolean {
  return value.greedy_search ?? (runsOnGpu(value) && value.dtype !== 'bf16');
}

/** Whether the definition asks for the native engine: native_engine, else whether the engine is built (on GPUs and CPUs alike). */
export function nativeRequested(value: ModelDefinition): boolean {
  return value.native_engine ?? nativeByDefault(value);
}

/** The native engine's default: wherever its addon is built (npm install builds it for the CPU); on the CPU, not when greedy_search asks for the GreedySearch model. */
export function nativeByDefault(value: ModelDefinition): boolean {
  return loadNative().addon !== undefined && (runsOnGpu(value) || value.greedy_search !== true);
}
