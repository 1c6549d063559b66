/**
 * The error catalogue. Every error Chorus raises on purpose is a `ChorusError` with a stable `code`
 * (what clients and tests match on) and the HTTP status a server answers it with. Messages say what was
 * wrong and what was expected.
 */

/** Every error code, its HTTP status and what it means. */
export const ERROR_CODES = {
  CHORUS_INVALID_ARGUMENT: { status: 400, description: 'a request field or option has a wrong value' },
  CHORUS_CONFIG_INVALID: { status: 400, description: 'a repository definition failed validation' },
  CHORUS_UNAUTHORIZED: { status: 401, description: 'the API key is missing or wrong' },
  CHORUS_NOT_FOUND: { status: 404, description: 'a named tokenizer, model, ensemble or pipeline does not exist' },
  CHORUS_METHOD_NOT_ALLOWED: { status: 405, description: 'the path exists, but answers other methods (the Allow header lists them)' },
  CHORUS_TOO_LARGE: { status: 413, description: 'the request body is larger than the server\'s body limit' },
  CHORUS_UNSUPPORTED_MEDIA_TYPE: { status: 415, description: 'the body is not of a content type the route takes (the OpenAI routes take application/json)' },
  CHORUS_FILE_MISSING: { status: 500, description: 'a file a definition points at does not exist' },
  CHORUS_FILE_INVALID: { status: 500, description: 'a file exists but cannot be parsed' },
  CHORUS_SOURCE_UNAVAILABLE: { status: 503, description: 'a remote source is not in the local cache and cannot be fetched' },
  CHORUS_MODEL_UNAVAILABLE: { status: 503, description: 'a model failed to load or build; it is tried again on an explicit load or when its source changes' },
  CHORUS_CACHE_FAILED: { status: 500, description: 'the model cache could not be written (a full disk, no permission, a build that died)' },
  CHORUS_OVERLOADED: { status: 503, description: 'the waiting queue is full; retry later' },
  CHORUS_CLOSED: { status: 503, description: 'the engine was closed and takes no new requests' },
  CHORUS_CANNOT_FIT: { status: 400, description: 'a request needs more tokens than the model\'s context holds' },
  CHORUS_SERVER_UNAVAILABLE: { status: 502, description: 'a server that chorus bench drives failed its first request (down, wrong URL, key or pipeline)' },
  CHORUS_DEVICE_MEMORY: { status: 503, description: 'a model does not fit the memory its device has free' },
  CHORUS_UNSUPPORTED: { status: 501, description: 'the feature or format is not supported' },
  CHORUS_INTERNAL: { status: 500, description: 'an invariant broke inside Chorus' },
} as const satisfies Record<string, { status: number; description: string }>;

/** A stable error code from the catalogue. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Extra facts an error carries: the offending parameter and value, and the underlying cause. */
export interface ErrorDetails {
  /** The request field, option or config path that was wrong. */
  param?: string;
  /** The value that was given. */
  value?: unknown;
  /** The error this one wraps. */
  cause?: unknown;
  /** The ensemble step it happened in. */
  step?: string;
}

/** The one error class Chorus throws on purpose. */
export class ChorusError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly param: string | undefined;
  readonly value: unknown;
  readonly step: string | undefined;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'ChorusError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.param = details.param;
    this.value = details.value;
    this.step = details.step;
  }
}

/** An invalid value for `param`: "`param` must be <expected>, got <value>". */
export function invalidArgument(param: string, expected: string, value: unknown): ChorusError {
  return new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} must be ${expected}, got ${describe(value)}`, {
    param,
    value,
  });
}

/** A named tokenizer, model, ensemble or pipeline that does not exist, listing those that do. */
export function notFound(kind: string, name: string, names: Iterable<string>): ChorusError {
  return new ChorusError('CHORUS_NOT_FOUND', `no ${kind} named ${name}; there are: ${[...names].join(', ') || 'none'}`, { param: kind, value: name });
}

/**
 * `error` said in other terms: the name `from` in its message (with a gloss in parentheses after it, as
 * in "request_output_len (max_tokens)") and at the head of its param becomes `to`. For a layer that
 * knows a lower one's names by its own: a pipeline's request fields, the CLI's flags.
 */
export function renamed(error: ChorusError, from: string, to: string): ChorusError {
  const word = new RegExp(`\\b${from}\\b( \\([a-z_]+\\))?`, 'g');
  return new ChorusError(error.code, error.message.replace(word, to), {
    ...(error.param === undefined ? {} : { param: error.param.replace(from, to) }),
    value: error.value,
    cause: error,
    ...(error.step === undefined ? {} : { step: error.step }),
  });
}

/** A short, bounded rendering of a value for an error message. */
export function describe(value: unknown): string {
  const bounded = (text: string): string => (text.length > 60 ? `${text.slice(0, 57)}...` : text);
  if (typeof value === 'string') return JSON.stringify(bounded(value));
  if (value === undefined) return 'nothing';
  // Infinity and NaN, which JSON writes as null; a bigint, which it cannot write.
  if (typeof value === 'number' || typeof value === 'bigint') return bounded(String(value));
  try {
    return bounded(JSON.stringify(value));
  } catch {
    // Nested past the stack, or holding a bigint: say what it is, without walking it.
    return Array.isArray(value) ? `a list of ${value.length}` : typeof value === 'object' && value !== null ? 'an object' : bounded(String(value));
  }
}
