/** The library API: what `import { ... } from 'chorus-inference'` gives. */
export { ChorusError, ERROR_CODES, type ErrorCode, type ErrorDetails } from './errors.ts';
export * from './tokenizers/index.ts';
export {
  formatDiagnostic,
  DATATYPES,
  STEP_KINDS,
  type Datatype,
  type Diagnostic,
  type Kind,
  type StepKind,
  type TensorSpec,
} from './config/index.ts';
export {
  loadRepository,
  openTokenizerDefinition,
  bundledRepositoryDir,
  type Repository,
  type Definition,
  type LoadedRepository,
} from './repository/index.ts';
export { buildModel, makeCheckpoint, type BuildOptions, type BuildResult, type MakeCheckpointOptions } from './modelbuild/index.ts';
export { DecoderSession, type KvCache, type DecoderStep, type DecoderOutput } from './runtime/index.ts';
