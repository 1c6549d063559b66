export { buildModel, BUILD_STAGES, type BuildOptions, type BuildResult, type BuildStage, type BuildInfo, type BuildStats, type BuildDtype } from './build.ts';
export { bytesText, percentSteps } from './progress.ts';
export { readHfCheckpoint, Checkpoint, type ModelConfig } from './checkpoint.ts';
export { architectureFor } from './arch/index.ts';
export { readLlama2cCheckpoint } from './llama2c-checkpoint.ts';
export { readSafetensors, writeSafetensors } from './safetensors.ts';
export type { DecoderSpec, DecoderWeights } from './decoder-spec.ts';
export type { Tensor } from './tensor.ts';
export { makeCheckpoint, CHECKPOINT_ARCHS, CHECKPOINT_DTYPES, type CheckpointArch, type CheckpointDtype, type CheckpointSize, type MakeCheckpointOptions } from './make-checkpoint.ts';
