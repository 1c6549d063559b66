export { startGrpcServer, PROTO_PATH, type GrpcServer, type GrpcServerOptions } from './server.ts';
export type { GrpcEngine, ModelInfo, ModelKind, TensorInfo } from './engine.ts';
