/**
 * Models whose load (or build) failed. A failed model answers every request with the same 503, naming
 * the model, the cause and the remedy, instead of building again on each one: it is tried again only
 * on an explicit load, or once its source changed on disk (a file's size or modification time, a file
 * added or removed).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../errors.ts';

/** Files looked at when stamping a source folder (a checkpoint has a few; a cache of them, more). */
const MAX_FILES = 10_000;

interface Failure {
  error: ChorusError;
  stamp: string;
}

/** The failed models of one store. */
export class LoadFailures {
  private readonly failures = new Map<string, Failure>();

  /**
   * The error to answer for `name` while its source is as it was when the load failed; undefined when
   * it did not fail, or its source changed since (the failure is then forgotten).
   */
  current(name: string, source: string | undefined): ChorusError | undefined {
    const failure = this.failures.get(name);
    if (failure === undefined) return undefined;
    if (failure.stamp === sourceStamp(source)) return failure.error;
    this.failures.delete(name);
    return undefined;
  }

  /**
   * Records that loading `name` from `source` failed with `error`; the error to answer (a 503). A model
   * that does not exist, and a source not on disk (a remote one that could not be fetched: the network
   * or the remote may come back; nothing was built) are not recorded (undefined: answer `error`).
   */
  record(name: string, source: string | undefined, error: unknown): ChorusError | undefined {
    if (error instanceof ChorusError && (error.code === 'CHORUS_NOT_FOUND' || error.code === 'CHORUS_SOURCE_UNAVAILABLE')) return undefined;
    if (source === undefined || !existsSync(source)) return undefined;
    const failure = loadFailure(name, error);
    this.failures.set(name, { error: failure, stamp: sourceStamp(source) });
    return failure;
  }

  /** Forgets a failure (an explicit load tries again). */
  clear(name: string): void {
    this.failures.delete(name);
  }

  /** Why `name` is unavailable, when its load failed. */
  reason(name: string): string | undefined {
    return this.failures.get(name)?.error.message;
  }
}

/** The 503 a failed model answers: the model, the cause, and what to do. */
export function loadFailure(name: string, error: unknown): ChorusError {
  const own = `model ${name}: `;
  let cause = error instanceof Error ? error.message : String(error);
  while (cause.startsWith(own)) cause = cause.slice(own.length);
  cause = cause.replace(/[.\s]+$/, '');
  return new ChorusError(
    'CHORUS_MODEL_UNAVAILABLE',
    `model ${name} failed to load: ${cause}. Fix that, then load it again (POST /v2/repository/models/${name}/load) or change its source; until then it is not retried`,
    // The cause's field when it names one (a definition's cuda_options), else the model.
    error instanceof ChorusError && error.param !== undefined ? { param: error.param, value: error.value, cause: error } : { param: 'model', value: name, cause: error },
  );
}

/** The size and modification time of every file under `path` (a file or a folder), as one string. */
export function sourceStamp(path: string | undefined): string {
  if (path === undefined || !existsSync(path)) return 'absent';
  const parts: string[] = [];
  const visit = (at: string, relative: string): void => {
    if (parts.length >= MAX_FILES) return;
    const stat = statSync(at);
    if (!stat.isDirectory()) {
      parts.push(`${relative}\0${stat.size}\0${stat.mtimeMs}`);
      return;
    }
    for (const entry of readdirSync(at).sort()) visit(join(at, entry), `${relative}/${entry}`);
  };
  try {
    visit(path, '');
  } catch (error) {
    return `unreadable: ${(error as Error).message}`;
  }
  return parts.join('\n');
}
