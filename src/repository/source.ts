/** Where a definition's files come from: a local path, a Hugging Face model id, or an S3 prefix (the last two fetched into the cache). */
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

/** A resolved `source`. */
export type ResolvedSource =
  | { kind: 'local'; path: string }
  | { kind: 'hf'; id: string; revision: string; path: string }
  | { kind: 's3'; bucket: string; prefix: string; path: string };

const HF_SOURCE = /^hf:([A-Za-z0-9][\w.-]*\/[\w.-]+|[A-Za-z0-9][\w.-]*)(?:@([\w./-]+))?$/;

/** The cache directory: `CHORUS_CACHE`, else `~/.cache/chorus`. */
export function cacheDir(): string {
  return process.env.CHORUS_CACHE ?? join(homedir(), '.cache', 'chorus');
}

/** True when `source` names a Hugging Face model id (`hf:org/name[@revision]`). */
export function isHubSource(source: string): boolean {
  return source.startsWith('hf:');
}

const S3_SOURCE = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/;

/** Resolves `source` against the repository directory; `undefined` for a malformed `hf:` id or `s3://` URL. */
export function resolveSource(source: string, repositoryDir: string): ResolvedSource | undefined {
  if (source.startsWith('s3://')) {
    const match = S3_SOURCE.exec(source);
    if (match === null) return undefined;
    const prefix = (match[2] ?? '').replace(/\/+$/, '');
    return { kind: 's3', bucket: match[1]!, prefix, path: join(cacheDir(), 's3', match[1]!, prefix) };
  }
  if (isHubSource(source)) {
    const match = HF_SOURCE.exec(source);
    if (match === null) return undefined;
    const id = match[1]!;
    const revision = match[2] ?? 'main';
    return { kind: 'hf', id, revision, path: join(cacheDir(), 'hf', id.replace('/', '--'), revision) };
  }
  return { kind: 'local', path: isAbsolute(source) ? source : resolve(repositoryDir, source) };
}
