/**
 * `--set-source NAME=SOURCE`: point a model or tokenizer definition at another source without editing
 * its YAML. `model:NAME=...` or `tokenizer:NAME=...` picks the kind when a name is both. A relative
 * path is taken from the current directory (where the user typed it), not the repository's. The
 * definition's `file` (a file inside its old source) is dropped: the new source is the thing itself.
 */
import { resolve } from 'node:path';
import { ChorusError } from '../errors.ts';
import type { Repository } from './repository.ts';
import { isHubSource } from './source.ts';

/** One parsed override. */
export interface SourceOverride {
  kind: 'model' | 'tokenizer' | undefined;
  name: string;
  source: string;
}

const PATTERN = /^(?:(model|tokenizer):)?([A-Za-z0-9][A-Za-z0-9_.-]*)=(.+)$/;

/** Parses `[kind:]NAME=SOURCE`. */
export function parseSourceOverride(text: string): SourceOverride {
  const match = PATTERN.exec(text);
  if (match === null) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `--set-source must be [model:|tokenizer:]NAME=SOURCE, got "${text}"`, { param: '--set-source', value: text });
  const source = match[3]!;
  const remote = isHubSource(source) || /^[a-z][a-z0-9+.-]*:\/\//.test(source);
  return { kind: match[1] as SourceOverride['kind'], name: match[2]!, source: remote ? source : resolve(source) };
}

/** Applies the overrides to the repository's definitions (their `source`), or throws naming the one that fits nothing. */
export function applySourceOverrides(repository: Repository, overrides: readonly SourceOverride[]): void {
  for (const { kind, name, source } of overrides) {
    const model = kind !== 'tokenizer' ? repository.models.get(name) : undefined;
    const tokenizer = kind !== 'model' ? repository.tokenizers.get(name) : undefined;
    if (model !== undefined && tokenizer !== undefined) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `--set-source ${name}: both a model and a tokenizer are named ${name}; write model:${name}=... or tokenizer:${name}=...`, { param: '--set-source' });
    }
    const target = model ?? tokenizer;
    if (target === undefined) {
      const names = [...(kind !== 'tokenizer' ? repository.models.keys() : []), ...(kind !== 'model' ? repository.tokenizers.keys() : [])];
      throw new ChorusError('CHORUS_NOT_FOUND', `--set-source ${name}: no ${kind ?? 'model or tokenizer'} is named ${name}; there are: ${names.join(', ') || 'none'}`, { param: '--set-source', value: name });
    }
    // The override names the model (or tokenizer) itself: a file inside the old source no longer applies.
    target.value = { ...target.value, source, file: undefined };
  }
}
