/**
 * Errors as gRPC statuses: a ChorusError's HTTP status maps to the gRPC code Triton uses for it (400
 * INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 501 UNIMPLEMENTED, 503 UNAVAILABLE), with its
 * message as the details; anything else is INTERNAL.
 */
import * as grpc from '@grpc/grpc-js';
import { ChorusError } from '../../errors.ts';

const CODES: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  401: grpc.status.UNAUTHENTICATED,
  404: grpc.status.NOT_FOUND,
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
