/**
 * The engines: ONNX Runtime's (ort), the native addon's, the encoder-decoder one and a pool over
 * instances, and `openEngine`, the one place that picks and opens one for a model definition.
 */
export { OrtEngine, type OrtEngineOptions } from './ort-engine.ts';
export { NativeEngine, nativeUnavailable, type NativeEngineOptions } from './native-engine.ts';
export { Seq2SeqEngine, type Seq2SeqEngineOptions } from './seq2seq-engine.ts';
export { EnginePool } from './engine-pool.ts';
export { openEngine, type OpenEngineOptions } from './open-engine.ts';
export { continuousCoreWanted, greedySearchWanted, instancePlacements, nativeRequested, rankGpus, runsOnGpu, type Placement } from './placement.ts';
