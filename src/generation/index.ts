export { validateSamplingParams, type SamplingParams, type ResolvedSamplingParams } from './sampling-params.ts';
export { sequenceState, type SequenceState } from './sequence-state.ts';
export { greedy, sample, type Choice } from './sampler.ts';
export * from './processors/index.ts';
