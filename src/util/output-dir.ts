/**
 * Output directories a command writes: made one level at a time (Node's recursive mkdir never returns
 * under /proc), and filled whole or not at all.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { ChorusError } from '../errors.ts';

/** Makes `path` and its missing parents, naming `param` (the flag that gave it) when it cannot. */
export function makeDirectory(path: string, param: string): void {
  if (path === '') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} must be a directory path, got ""`, { param });
  const missing: string[] = [];
  let at = resolve(path);
  while (!existsSync(at)) {
    missing.push(at);
    const up = dirname(at);
    if (up === at) break;
    at = up;
  }
  if (existsSync(at) && !statSync(at).isDirectory()) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} ${path}: ${at} is a file, not a directory`, { param });
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir);
    } catch (error) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} ${path}: cannot make ${dir} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, { param, cause: error });
    }
  }
}

/**
 * Writes a directory whole or not at all: `write` fills a new directory beside `out`, which then takes
 * `out`'s place; a failure removes it and leaves `out` as it was. An `out` that exists must be empty or
 * `ours` (an earlier output of the same command, which is replaced): anything else is refused, never
 * deleted.
 */
export function replaceDirectory<T>(out: string, param: string, ours: { file: string; what: string }, write: (staging: string) => T): T {
  if (out === '') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} must be a directory path, got ""`, { param });
  const target = resolve(out);
  if (existsSync(target)) {
    if (!statSync(target).isDirectory()) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} ${out} is a file: give a new or empty directory, or an earlier ${ours.what}`, { param });
    if (readdirSync(target).length > 0 && !existsSync(join(target, ours.file))) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} ${out} holds other files (no ${ours.file}): give a new or empty directory, or an earlier ${ours.what}`, { param });
    }
  }
  makeDirectory(dirname(target), param);
  const staging = join(dirname(target), `.${basename(target)}.partial-${process.pid}`);
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging);
  let result: T;
  try {
    result = write(staging);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    throw error;
  }
  const old = join(dirname(target), `.${basename(target)}.old-${process.pid}`);
  const had = existsSync(target);
  if (had) renameSync(target, old);
  try {
    renameSync(staging, target);
  } catch (error) {
    if (had) renameSync(old, target);
    rmSync(staging, { recursive: true, force: true });
    throw error;
  }
  if (had) rmSync(old, { recursive: true, force: true });
  return result;
}
