/**
 * What changed between two readings of a repository, per model: its definition, or the files of a
 * local source (each file's path, size and modification time), so a model whose YAML stayed the same
 * but whose checkpoint was replaced counts as changed.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { resolveSource, type Repository } from '../repository/index.ts';

/** Models added, changed and removed between two readings. */
export interface RepositoryChanges {
  added: string[];
  changed: string[];
  removed: string[];
}

/** Compares the models of two readings; `before` holds the fingerprints of the first. */
export function modelChanges(before: ReadonlyMap<string, string>, after: Repository): { changes: RepositoryChanges; fingerprints: Map<string, string> } {
  const fingerprints = modelFingerprints(after);
  const changes: RepositoryChanges = { added: [], changed: [], removed: [] };
  for (const [name, print] of fingerprints) {
    const old = before.get(name);
    if (old === undefined) changes.added.push(name);
    else if (old !== print) changes.changed.push(name);
  }
  for (const name of before.keys()) if (!fingerprints.has(name)) changes.removed.push(name);
  return { changes, fingerprints };
}

/** Each model's fingerprint: its definition and, for a local source, its files' sizes and times. */
export function modelFingerprints(repository: Repository): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, definition] of repository.models) {
    const value = definition.value;
    const resolved = resolveSource(value.source, repository.dir);
    const path = resolved?.kind === 'local' ? (value.file === undefined ? resolved.path : join(resolved.path, value.file)) : undefined;
    out.set(name, JSON.stringify([value, path === undefined ? [] : files(path)]));
  }
  return out;
}

/** `path size mtime` of a file, or of every file under a directory (a few levels deep). */
function files(path: string, depth = 0): string[] {
  if (!existsSync(path)) return [];
  const stat = statSync(path);
  if (!stat.isDirectory()) return [`${path} ${stat.size} ${stat.mtimeMs}`];
  if (depth > 3) return [];
  return readdirSync(path).sort().flatMap((entry) => files(join(path, entry), depth + 1));
}
