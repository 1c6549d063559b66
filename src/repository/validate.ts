/** Reads a repository and runs every rule over it. */
import { compareDiagnostics } from '../config/diagnostic.ts';
import { checkEnsembles } from './check-ensembles.ts';
import { checkModels } from './check-models.ts';
import { checkPipelines } from './check-pipelines.ts';
import { checkSources } from './check-sources.ts';
import { checkTokenizers } from './check-tokenizers.ts';
import { applySourceOverrides, type SourceOverride } from './overrides.ts';
import { readRepository, type LoadedRepository, type RepositoryCheck } from './repository.ts';

/** Every cross-definition rule, in the order their diagnostics are gathered. */
export const REPOSITORY_CHECKS: readonly RepositoryCheck[] = [checkTokenizers, checkSources, checkModels, checkEnsembles, checkPipelines];

/** Reads `dir`, points definitions at overridden sources, and reports everything wrong with it at once. */
export function loadRepository(dir: string, options: { sourceOverrides?: readonly SourceOverride[] } = {}): LoadedRepository {
  const loaded = readRepository(dir);
  applySourceOverrides(loaded.repository, options.sourceOverrides ?? []);
  for (const check of REPOSITORY_CHECKS) loaded.diagnostics.push(...check(loaded.repository));
  loaded.diagnostics.sort(compareDiagnostics);
  return loaded;
}
