/**
 * Errors on the wire. KServe and the generate extension answer `{"error": "..."}`; OpenAI routes answer
 * `{"error": {"message", "type", "param", "code"}}`. A ChorusError keeps its status (an overloaded
 * queue is 503 with Retry-After, 429 on OpenAI routes); a body that fails its schema is a 400 naming
 * the field; anything else is a 500 that says an internal error happened, never a crash.
 */
import { ChorusError } from '../errors.ts';

export interface WireError {
  status: number;
  message: string;
  code: string;
  param: string | undefined;
}

export function wireError(error: unknown): WireError {
  if (error instanceof ChorusError) return { status: error.status, message: error.message, code: error.code, param: error.param };
  const e = error as { statusCode?: number; validation?: unknown; message?: string; code?: string };
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return { status: e.statusCode, message: e.message ?? 'bad request', code: e.code ?? 'CHORUS_INVALID_ARGUMENT', param: undefined };
  }
  return { status: 500, message: `internal error: ${e.message ?? String(error)}`, code: 'CHORUS_INTERNAL', param: undefined };
}

/** KServe / generate shape. */
export function errorBody(error: unknown): { error: string } {
  return { error: wireError(error).message };
}

/** OpenAI's shape, with its error types. */
export function openAiErrorBody(error: unknown): { error: { message: string; type: string; param: string | null; code: string } } {
  const w = wireError(error);
  const type = w.status === 401 ? 'authentication_error' : w.status === 404 ? 'invalid_request_error' : w.status === 429 || w.code === 'CHORUS_OVERLOADED' ? 'rate_limit_error' : w.status < 500 ? 'invalid_request_error' : 'server_error';
  return { error: { message: w.message, type, param: w.param ?? null, code: w.code } };
}

/**
 * An error's status and extra headers, as every route answers it (streamed or not): an overloaded or
 * closed engine says when to retry, and the OpenAI routes answer a full queue 429, as OpenAI does.
 */
export function errorAnswer(error: unknown, openAi: boolean): { status: number; headers: Record<string, string> } {
  const { status } = wireError(error);
  if (error instanceof ChorusError && (error.code === 'CHORUS_OVERLOADED' || error.code === 'CHORUS_CLOSED')) {
    return { status: openAi && error.code === 'CHORUS_OVERLOADED' ? 429 : status, headers: { 'retry-after': '1' } };
  }
  return { status, headers: {} };
}
