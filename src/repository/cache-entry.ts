/**
 * Cache entries written whole. An entry (a download, a fallback checkpoint, a build) is a directory
 * that is written under a temporary name beside it and renamed into place when complete, so a reader
 * sees all of it or none of it. One lock per entry, shared by every process using the cache
 * (proper-lockfile: a `<entry>.lock` directory whose holder touches it every few seconds), makes a
 * second process wait for the first and then use its result rather than build it again. A holder
 * killed mid-write leaves a lock nobody touches: after STALE_MS it counts as abandoned, and the next
 * process takes it over and clears the killed one's temporary directory.
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, linkSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import lockfile from 'proper-lockfile';
import { ChorusError } from '../errors.ts';

/** A lock not touched for this long belongs to a process that died. */
export const STALE_MS = 15_000;
const UPDATE_MS = 3_000;

export interface EntryOptions {
  /** Whether the entry as it stands holds what is wanted. Default: it exists. */
  complete?: (dir: string) => boolean;
  /** Start the new version from the files of the current one (hard links), for entries filled file by file. */
  keepFiles?: boolean;
  /** Told when this process waits for another. */
  log?: (line: string) => void;
}

/**
 * Makes the entry `dir` complete: when it is not, takes its lock (waiting while another process holds
 * it), then has `write` fill a fresh temporary directory and renames that into place. Errors of
 * `write` leave the entry as it was.
 */
export async function writeEntry(dir: string, write: (tmp: string) => Promise<void>, options: EntryOptions = {}): Promise<void> {
  const complete = options.complete ?? existsSync;
  if (complete(dir)) return;
  const release = await lockEntry(dir, options.log);
  let compromised: Error | undefined;
  release.onCompromised((error) => (compromised = error));
  const tmp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    if (complete(dir)) return;
    clearLeftovers(dir);
    mkdirSync(tmp, { recursive: true });
    if (options.keepFiles === true && existsSync(dir)) linkTree(dir, tmp);
    await write(tmp);
    if (compromised !== undefined) throw new ChorusError('CHORUS_CACHE_FAILED', `lost the lock of the cache entry ${dir} while writing it (${compromised.message}); another process may be writing it`, { value: dir });
    const old = existsSync(dir) ? `${dir}.old-${process.pid}-${randomBytes(4).toString('hex')}` : undefined;
    if (old !== undefined) renameSync(dir, old);
    renameSync(tmp, dir);
    if (old !== undefined) rmSync(old, { recursive: true, force: true });
  } catch (error) {
    rmSync(tmp, { recursive: true, force: true });
    throw cacheError(dir, error);
  } finally {
    await release().catch(() => {});
  }
}

interface Release {
  (): Promise<void>;
  onCompromised(handler: (error: Error) => void): void;
}

/** Takes the entry's lock, telling `log` when another process holds it. */
async function lockEntry(dir: string, log?: (line: string) => void): Promise<Release> {
  let onCompromised = (error: Error): void => void error;
  const options = (retries: number | { forever: true; minTimeout: number; maxTimeout: number }) => ({
    lockfilePath: `${dir}.lock`,
    realpath: false,
    stale: STALE_MS,
    update: UPDATE_MS,
    retries,
    onCompromised: (error: Error) => onCompromised(error),
  });
  try {
    mkdirSync(dirname(dir), { recursive: true });
  } catch (error) {
    throw cacheError(dir, error);
  }
  let release: () => Promise<void>;
  try {
    release = await lockfile.lock(dir, options(0));
  } catch (error) {
    if ((error as { code?: string }).code !== 'ELOCKED') throw cacheError(dir, error);
    log?.(`waiting for another process writing ${dir}`);
    try {
      release = await lockfile.lock(dir, options({ forever: true, minTimeout: 100, maxTimeout: 1_000 }));
    } catch (error) {
      throw cacheError(dir, error);
    }
  }
  return Object.assign(() => release(), {
    onCompromised: (handler: (error: Error) => void) => {
      onCompromised = handler;
    },
  });
}

/** Temporary and replaced directories of `dir` that a killed or failed writer left (the caller holds the lock). */
function clearLeftovers(dir: string): void {
  const name = basename(dir);
  for (const entry of readdirSync(dirname(dir))) {
    if (entry.startsWith(`${name}.tmp-`) || entry.startsWith(`${name}.old-`)) rmSync(join(dirname(dir), entry), { recursive: true, force: true });
  }
}

/** Hard links (copies, where the file system has none) of every file under `from` at the same places under `to`. */
function linkTree(from: string, to: string): void {
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (entry.isDirectory()) {
      mkdirSync(target, { recursive: true });
      linkTree(source, target);
    } else if (entry.isFile()) {
      try {
        linkSync(source, target);
      } catch {
        copyFileSync(source, target);
      }
    }
  }
}

const FULL = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);

/** A file-system error (one naming a path, or a full disk) as CHORUS_CACHE_FAILED naming the entry and the cause; others as they are. */
function cacheError(dir: string, error: unknown): unknown {
  const { code, path } = error as { code?: unknown; path?: unknown };
  if (error instanceof ChorusError || typeof code !== 'string' || (typeof path !== 'string' && !FULL.has(code))) return error;
  const why = code === 'ENOSPC' ? 'the disk is full' : code === 'EDQUOT' ? 'the disk quota is used up' : code === 'EFBIG' ? 'a file grew past the size allowed' : code === 'EACCES' || code === 'EPERM' || code === 'EROFS' ? 'no permission to write there' : (error as Error).message;
  const hint = FULL.has(code) ? '; free space or set CHORUS_CACHE to a larger disk' : code === 'EACCES' || code === 'EPERM' || code === 'EROFS' ? '; set CHORUS_CACHE to a writable directory' : '';
  return new ChorusError('CHORUS_CACHE_FAILED', `cannot write the cache entry ${dir}: ${why} (${code})${hint}`, { value: dir, cause: error });
}
