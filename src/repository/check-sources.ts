/** Checks that `source` (and `file`) of tokenizers and models point at something that exists. */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Diagnostic } from '../config/diagnostic.ts';
import { ChorusError } from '../errors.ts';
import { architectureFor, readConfig } from '../modelbuild/index.ts';
import { tokenizerFileCandidates } from './tokenizer-files.ts';
import { diagnosticAt, type Definition, type Repository } from './repository.ts';
import { describeSource, isRemote } from './fetch-source.ts';
import { resolveSource } from './source.ts';

/** Diagnostics for the sources of every tokenizer and model. */
export function checkSources(repository: Repository): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const definition of repository.tokenizers.values()) {
    const { source } = definition.value;
    if (source === undefined) continue;
    const dir = checkSource(definition, source, repository.dir, out);
    if (dir === undefined || !statSync(dir).isDirectory()) continue;
    const candidates = tokenizerFileCandidates(definition.value);
    if (!candidates.some((name) => existsSync(join(dir, name)))) {
      const path = definition.value.file === undefined ? ['source'] : ['file'];
      out.push(diagnosticAt(definition, path, `${dir} holds no ${candidates.join(' or ')}`));
    }
  }
  for (const definition of repository.models.values()) {
    const dir = checkSource(definition, definition.value.source, repository.dir, out);
    if (dir !== undefined) checkCheckpointConfig(definition, dir, out);
    const file = definition.value.file;
    if (dir !== undefined && file !== undefined && !existsSync(join(dir, file))) {
      // A hub id's cache directory fills as files are fetched: a file not there yet is fetched on load.
      const resolved = resolveSource(definition.value.source, repository.dir);
      const hub = resolved !== undefined && isRemote(resolved);
      out.push(diagnosticAt(definition, ['file'], `${join(dir, file)} does not exist${hub ? ' yet; it is fetched on first load' : ''}`, { severity: hub ? 'warning' : 'error' }));
    }
  }
  return out;
}

/** Reports a source that is malformed, missing or not cached; returns its path when it exists. */
function checkSource(definition: Definition<'tokenizer' | 'model'>, source: string, repositoryDir: string, out: Diagnostic[]): string | undefined {
  const resolved = resolveSource(source, repositoryDir);
  if (resolved === undefined) {
    out.push(diagnosticAt(definition, ['source'], `source must be a path, hf:<org>/<name>[@<revision>] or s3://<bucket>/<prefix>, got "${source}"`));
    return undefined;
  }
  if (existsSync(resolved.path)) return resolved.path;
  if (isRemote(resolved)) {
    const fallback = (definition.value as { fallback?: unknown }).fallback;
    const instead =
      fallback === undefined ? ''
      : definition.kind === 'model' ? '; until then its fallback (seeded random weights) is served'
      : `; until then tokenizer ${String(fallback)} serves in its place`;
    out.push(
      diagnosticAt(definition, ['source'], `${describeSource(resolved)} is not in the cache (${resolved.path}); it is fetched on first load, or place its files there, or point source at a local path${instead}`, {
        severity: 'warning',
      }),
    );
  } else {
    out.push(diagnosticAt(definition, ['source'], `source path ${resolved.path} does not exist`));
  }
  return undefined;
}

/**
 * A checkpoint directory's config.json, read as a build reads it: not JSON, or naming an architecture or
 * option the builder does not take, is said here, before the first request meets it as a 503. A built
 * directory (chorus_build.json) was checked when it was built.
 */
function checkCheckpointConfig(definition: Definition<'model'>, dir: string, out: Diagnostic[]): void {
  if (!statSync(dir).isDirectory() || !existsSync(join(dir, 'config.json')) || existsSync(join(dir, 'chorus_build.json'))) return;
  try {
    const config = readConfig(dir);
    architectureFor(config).spec(config);
  } catch (error) {
    if (!(error instanceof ChorusError)) throw error;
    const file = join(dir, 'config.json');
    // A warning, so that one model's checkpoint does not keep the rest of the repository from serving:
    // that model answers 503 with this message, as any model that fails to load does.
    const problem = error.message.includes(file) ? error.message : `${file}: ${error.message.replace(/^config\.json: /, '')}`;
    out.push(diagnosticAt(definition, ['source'], `loading it will fail: ${problem}`, { severity: 'warning' }));
  }
}
