export { startGrpcServer, PROTO_PATH, type GrpcServer, type GrpcServerOptions } from './server.ts';
export { serviceEngine, type GrpcEngine, type ModelInfo, type ModelKind, type TensorInfo } from './engine.ts';
