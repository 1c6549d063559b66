/** Checks that a definition's reference to another definition resolves. */
import type { Diagnostic } from '../config/diagnostic.ts';
import type { ValuePath } from '../config/document.ts';
import { KINDS, type Kind } from '../config/schemas.ts';
import { diagnosticAt, mapOf, type Definition, type Repository } from './repository.ts';

/** An error when `name` is not a `kind` in the repository (nothing when it exists, even if broken). */
export function checkReference(repository: Repository, from: Definition<Kind>, path: ValuePath, kind: Kind, name: string): Diagnostic[] {
  if (mapOf(repository, kind).has(name) || repository.broken[kind].has(name)) return [];
  const known = [...mapOf(repository, kind).keys()];
  const hint = known.length > 0 ? `; defined: ${known.join(', ')}` : '';
  return [diagnosticAt(from, path, `${kind} "${name}" does not exist (no ${KINDS[kind].folder}/${name}.yaml${hint})`)];
}
