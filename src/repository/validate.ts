/** Reads a repository and runs every rule over it. */
import { checkEnsembles } from './check-ensembles.ts';
import { checkModels } from './check-models.ts';
import { checkPipelines } from './check-pipelines.ts';
import { checkSources } from './check-sources.ts';
import { checkTokenizers } from './check-tokenizers.ts';
import { readRepository, type LoadedRepository, type RepositoryCheck } from './repository.ts';

/** Every cross-definition rule, in the order their diagnostics are gathered. */
export const REPOSITORY_CHECKS: readonly RepositoryCheck[] = [checkTokenizers, checkSources, checkModels, checkEnsembles, checkPipelines];

/** Reads `dir` and reports everything wrong with it at once. */
export function loadRepository(dir: string): LoadedRepository {
  return readRepository(dir, REPOSITORY_CHECKS);
}
