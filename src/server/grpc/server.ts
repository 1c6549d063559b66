/**
 * The KServe v2 gRPC server (Triton's port 8001): inference.GRPCInferenceService from kserve_v2.proto
 * over a GrpcEngine, with the HTTP server's rules: the API key as metadata `authorization: Bearer
 * <key>` on every RPC but ServerLive and ServerReady, and the same message size limit as the HTTP body
 * limit.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ChorusError } from '../../errors.ts';
import type { Metrics } from '../metrics.ts';
import type { GrpcEngine } from './engine.ts';
import { inferenceHandlers } from './service.ts';
import { grpcError } from './status.ts';

/** Where the service's protocol is defined. */
export const PROTO_PATH = fileURLToPath(new URL('./kserve_v2.proto', import.meta.url));

export interface GrpcServerOptions {
  engine: GrpcEngine;
  /** Address to listen on. Default: 127.0.0.1. */
  host?: string;
  /** Port; 0 picks a free one. Default: 8001. */
  port?: number;
  /** Calls must send metadata `authorization: Bearer <apiKey>` (health RPCs excepted). Default: none. */
  apiKey?: string;
  /** Largest message received, bytes (the HTTP body limit). Default: 64 MiB. */
  maxMessageBytes?: number;
  /** The HTTP server's request metrics, which inference calls then count in too. Default: none. */
  metrics?: Metrics;
}

/** A listening gRPC server. */
export interface GrpcServer {
  /** The port it listens on. */
  port: number;
  /** Stops taking calls and waits for those in flight. */
  close(): Promise<void>;
  /** Ends every call now (their generation is cancelled). */
  forceClose(): void;
}

const PUBLIC = new Set(['ServerLive', 'ServerReady']);

export async function startGrpcServer(options: GrpcServerOptions): Promise<GrpcServer> {
  const definition = protoLoader.loadSync(PROTO_PATH, { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as { inference: { GRPCInferenceService: { service: grpc.ServiceDefinition } } };
  const limit = options.maxMessageBytes ?? 64 * 1024 * 1024;
  const server = new grpc.Server({ 'grpc.max_receive_message_length': limit, 'grpc.max_send_message_length': -1 });
  const handlers = inferenceHandlers(options.engine, options.metrics);
  const guarded = Object.fromEntries(Object.entries(handlers).map(([name, handler]) => [name, PUBLIC.has(name) || options.apiKey === undefined ? handler : authorized(handler, options.apiKey)]));
  server.addService(loaded.inference.GRPCInferenceService.service, guarded);
  const host = options.host ?? '127.0.0.1';
  const address = `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 8001}`;
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(new ChorusError('CHORUS_INVALID_ARGUMENT', `cannot listen for gRPC on ${address}: ${error.message} (--grpc-port picks another port, 0 turns gRPC off)`, { param: 'grpc-port', cause: error })) : resolve(bound),
    );
  });
  return {
    port,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
    forceClose: () => server.forceShutdown(),
  };
}

/** The handler, answering UNAUTHENTICATED to a call without the key. */
function authorized(handler: grpc.UntypedHandleCall, apiKey: string): grpc.UntypedHandleCall {
  const denied = (): grpc.ServiceError => grpcError(new ChorusError('CHORUS_UNAUTHORIZED', 'missing or wrong API key: send metadata authorization: Bearer <key>', { param: 'authorization' }));
  return ((call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>, callback?: grpc.sendUnaryData<unknown>) => {
    if (call.metadata.get('authorization')[0] === `Bearer ${apiKey}`) {
      (handler as (...args: unknown[]) => void)(call, callback);
    } else if (callback !== undefined) {
      callback(denied());
    } else {
      (call as grpc.ServerDuplexStream<unknown, unknown>).emit('error', denied());
    }
  }) as grpc.UntypedHandleCall;
}
