/**
 * Errors as gRPC statuses: a ChorusError's HTTP status maps to the gRPC code Triton uses for it (400
 * INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 501 UNIMPLEMENTED, 503 UNAVAILABLE), with its
 * message as the details; anything else is INTERNAL.
 */
import * as grpc from '@grpc/grpc-js';
import { ChorusError } from '../../errors.ts';
import type { Metrics } from '../metrics.ts';
import type { GrpcEngine } from './engine.ts';

const CODES: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  401: grpc.status.UNAUTHENTICATED,
  404: grpc.status.NOT_FOUND,
  405: grpc.status.UNIMPLEMENTED,
  413: grpc.status.RESOURCE_EXHAUSTED,
  415: grpc.status.INVALID_ARGUMENT,
  501: grpc.status.UNIMPLEMENTED,
  502: grpc.status.UNAVAILABLE,
  503: grpc.status.UNAVAILABLE,
};

/** The status an error answers with. */
export function grpcError(error: unknown): grpc.ServiceError & { details: string } {
  const chorus = error instanceof ChorusError;
  const code = chorus ? (CODES[error.status] ?? grpc.status.INTERNAL) : grpc.status.INTERNAL;
  const details = chorus ? error.message : `internal error: ${error instanceof Error ? error.message : String(error)}`;
  return Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() });
}

/** The HTTP status an error stands for, for the request metrics HTTP and gRPC share. */
export function statusOf(error: unknown): number {
  return error instanceof ChorusError ? error.status : 500;
}

/**
 * The request metrics' end for a call to `name`, begun now; none for a name the repository lacks (a
 * name made up by a client makes no series). Rejected calls to a known name count, as over HTTP.
 */
export function counted(metrics: Metrics | undefined, engine: GrpcEngine, name: string): ((status: number) => void) | undefined {
  if (metrics === undefined) return undefined;
  try {
    return metrics.begin(engine.resolve(name).name);
  } catch {
    return undefined;
  }
}
