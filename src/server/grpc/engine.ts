/**
 * What the gRPC service sees below it: the engine client, as the HTTP routes see it (names and their
 * kinds, text generation, tensors in and out, model control).
 */
export type { EngineClient as GrpcEngine, ModelInfo, ModelKind, TensorInfo } from '../../serving/index.ts';
