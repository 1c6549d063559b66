/**
 * Where a model's instances run and which engine serves them, read from its definition: one execution
 * provider list per instance (`instance_group` counts on cpu or on each listed GPU; else one on
 * `device`), GreedySearch and the native engine by default on GPUs.
 */
import type { ModelDefinition } from '../../config/index.ts';
import { loadNative } from '../../native/index.ts';
import type { ExecutionProviders } from '../../runtime/index.ts';

/** One instance's execution providers. */
export type Placement = ExecutionProviders;

export function instancePlacements(value: ModelDefinition): Placement[] {
  const device = value.device ?? 'cpu';
  const defaultGpu = device.startsWith('cuda') ? Number(device.split(':')[1] ?? 0) : 0;
  const on = (kind: 'cpu' | 'gpu', gpu: number): Placement => (kind === 'cpu' ? ['cpu'] : [{ name: 'cuda', deviceId: gpu }]);
  const defaultKind = device === 'cpu' ? 'cpu' : 'gpu';
  if (value.instance_group === undefined) return [on(defaultKind, defaultGpu)];
  return value.instance_group.flatMap((group) => {
    const kind = group.kind ?? defaultKind;
    const gpus = kind === 'gpu' ? (group.gpus ?? [defaultGpu]) : [0];
    return gpus.flatMap((gpu) => Array.from({ length: group.count ?? 1 }, () => on(kind, gpu)));
  });
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
