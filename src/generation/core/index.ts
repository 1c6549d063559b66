/**
 * The generation core: what every engine shares and nothing that runs a model (no ONNX Runtime, no
 * native addon): the engine interface, the scheduler, sequences, sampling parameters, logits
 * processors, beam search and stop strings.
 */
export { validateInputIds, validateSamplingParams, type SamplingParams, type ResolvedSamplingParams } from './sampling-params.ts';
export { sequenceState, type SequenceState } from './sequence-state.ts';
export { greedy, sample, type Choice } from './sampler.ts';
export * from './processors/index.ts';
export type { Engine, EngineStats, FinishReason, GenerateRequest, RequestMetrics, TokenEvent } from './engine.ts';
export { Scheduler, type Schedulable, type SchedulerLimits } from './scheduler.ts';
export { StopStringMatcher, type StopMatch } from './stop-strings.ts';
