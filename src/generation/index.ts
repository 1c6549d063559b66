export { validateInputIds, validateSamplingParams, type SamplingParams, type ResolvedSamplingParams } from './sampling-params.ts';
export { sequenceState, type SequenceState } from './sequence-state.ts';
export { greedy, sample, type Choice } from './sampler.ts';
export * from './processors/index.ts';
export type { Engine, EngineStats, FinishReason, GenerateRequest, RequestMetrics, TokenEvent } from './engine.ts';
export { OrtEngine, type OrtEngineOptions } from './ort-engine.ts';
export { Scheduler, type Schedulable, type SchedulerLimits } from './scheduler.ts';
export { StopStringMatcher, type StopMatch } from './stop-strings.ts';
export { Seq2SeqEngine, type Seq2SeqEngineOptions } from './seq2seq-engine.ts';
