export { CompiledEnsemble, inStep, stepKind } from './executor.ts';
export { generateRequests } from './steps/generate.ts';
export { ModelStore, type LoadedModel, type ModelControlMode, type ModelState, type ModelStoreOptions, type EncodeRequest, type EncodeResult } from './model-store.ts';
export { tensor, tensorFromValue, rows, padded, perRow, elementCount, wideElement, type Tensor, type Element } from './tensor.ts';
export type { TensorRecord, StepImpl, StepContext } from './steps/step.ts';
export { DynamicBatcher, type BatcherOptions, type BatcherStats } from './dynamic-batcher.ts';
