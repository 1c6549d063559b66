/** Where a definition's files come from: a local path, or a Hugging Face model id read from the cache. */
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

/** A resolved `source`. */
export type ResolvedSource =
  | { kind: 'local'; path: string }
  | { kind: 'hf'; id: string; revision: string; path: string };

const HF_SOURCE = /^hf:([A-Za-z0-9][\w.-]*\/[\w.-]+|[A-Za-z0-9][\w.-]*)(?:@([\w./-]+))?$/;

/** The cache directory: `CHORUS_CACHE`, else `~/.cache/chorus`. */
export function cacheDir(): string {
  return process.env.CHORUS_CACHE ?? join(homedir(), '.cache', 'chorus');
}

/** True when `source` names a Hugging Face model id (`hf:org/name[@revision]`). */
export function isHubSource(source: string): boolean {
  return source.startsWith('hf:');
}

/** Resolves `source` against the repository directory; `undefined` for a malformed `hf:` id. */
export function resolveSource(source: string, repositoryDir: string): ResolvedSource | undefined {
  if (isHubSource(source)) {
    const match = HF_SOURCE.exec(source);
    if (match === null) return undefined;
    const id = match[1]!;
    const revision = match[2] ?? 'main';
    return { kind: 'hf', id, revision, path: join(cacheDir(), 'hf', id.replace('/', '--'), revision) };
  }
  return { kind: 'local', path: isAbsolute(source) ? source : resolve(repositoryDir, source) };
}
