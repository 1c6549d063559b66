/** A repository: the four kinds of definitions read from one directory, checked, with their diagnostics. */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, resolve } from 'node:path';
import type { Static } from '@sinclair/typebox';
import { compareDiagnostics, type Diagnostic } from '../config/diagnostic.ts';
import { DefinitionDocument, type ValuePath } from '../config/document.ts';
import { KINDS, type Kind } from '../config/schemas.ts';
import { validateSchema } from '../config/validate-schema.ts';

/** The value type of each kind. */
export type DefinitionValue<K extends Kind> = Static<(typeof KINDS)[K]['schema']>;

/** One definition that passed its schema. */
export interface Definition<K extends Kind> {
  kind: K;
  name: string;
  /** Path of the YAML file. */
  file: string;
  doc: DefinitionDocument;
  value: DefinitionValue<K>;
}

/** The schema-valid definitions of a repository, by kind and name. */
export interface Repository {
  /** Absolute path of the repository directory. */
  dir: string;
  tokenizers: Map<string, Definition<'tokenizer'>>;
  models: Map<string, Definition<'model'>>;
  ensembles: Map<string, Definition<'ensemble'>>;
  pipelines: Map<string, Definition<'pipeline'>>;
  /** Names whose files exist but failed to parse or validate: references to them are not reported again. */
  broken: Record<Kind, Set<string>>;
}

/** A repository and everything found wrong in it. */
export interface LoadedRepository {
  repository: Repository;
  /** Sorted by file and position. */
  diagnostics: Diagnostic[];
}

/** A check that runs once every definition is read. */
export type RepositoryCheck = (repository: Repository) => Diagnostic[];

const YAML_EXTENSIONS = new Set(['.yaml', '.yml']);

/**
 * Reads every definition under `dir` (`tokenizers/`, `models/`, `ensembles/`, `pipelines/`), checks each
 * against its schema, then runs `checks` (the cross-definition rules) over the valid ones.
 */
export function readRepository(dir: string, checks: readonly RepositoryCheck[] = []): LoadedRepository {
  const root = resolve(dir);
  const repository: Repository = {
    dir: root,
    tokenizers: new Map(),
    models: new Map(),
    ensembles: new Map(),
    pipelines: new Map(),
    broken: { tokenizer: new Set(), model: new Set(), ensemble: new Set(), pipeline: new Set() },
  };
  const diagnostics: Diagnostic[] = [];
  if (!existsSync(root) || !statSync(root).isDirectory()) {
    diagnostics.push({ file: dir, line: 1, column: 1, severity: 'error', message: existsSync(root) ? 'the repository is a file, not a directory' : 'repository directory does not exist' });
    return { repository, diagnostics };
  }
  let found = 0;
  for (const kind of Object.keys(KINDS) as Kind[]) {
    const folder = join(root, KINDS[kind].folder);
    if (!existsSync(folder)) continue;
    const seen = new Map<string, string>();
    for (const entry of readdirSync(folder).sort()) {
      if (!YAML_EXTENSIONS.has(extname(entry))) continue;
      found++;
      const file = join(folder, entry);
      const display = relative(process.cwd(), file) || file;
      const name = entry.slice(0, -extname(entry).length);
      const twin = seen.get(name);
      if (twin !== undefined) {
        diagnostics.push({ file: display, line: 1, column: 1, severity: 'error', message: `${kind} "${name}" is defined twice: here and in ${twin}` });
        continue;
      }
      seen.set(name, display);
      const doc = new DefinitionDocument(display, readFileSync(file, 'utf8'));
      const problems = [...doc.syntaxErrors];
      if (!problems.some((d) => d.severity === 'error')) problems.push(...validateSchema(kind, doc));
      diagnostics.push(...problems);
      if (problems.some((d) => d.severity === 'error')) {
        repository.broken[kind].add(name);
        continue;
      }
      const definition = { kind, name, file: display, doc, value: doc.value } as Definition<typeof kind>;
      (mapOf(repository, kind) as Map<string, Definition<Kind>>).set(name, definition);
    }
  }
  if (found === 0) {
    diagnostics.push({
      file: dir,
      line: 1,
      column: 1,
      severity: 'error',
      message: `no definitions found: expected YAML files under ${Object.values(KINDS).map((k) => `${k.folder}/`).join(', ')}`,
    });
  }
  for (const check of checks) diagnostics.push(...check(repository));
  diagnostics.sort(compareDiagnostics);
  return { repository, diagnostics };
}

/** The map holding definitions of `kind`. */
export function mapOf<K extends Kind>(repository: Repository, kind: K): Map<string, Definition<K>> {
  const maps = { tokenizer: repository.tokenizers, model: repository.models, ensemble: repository.ensembles, pipeline: repository.pipelines };
  return maps[kind] as unknown as Map<string, Definition<K>>;
}

/** A diagnostic at `path` (its key with `key: true`) in a definition's file. */
export function diagnosticAt(
  definition: Definition<Kind>,
  path: ValuePath,
  message: string,
  options: { severity?: 'error' | 'warning'; key?: boolean } = {},
): Diagnostic {
  return {
    file: definition.file,
    ...definition.doc.locate(path, { key: options.key ?? false }),
    severity: options.severity ?? 'error',
    message,
  };
}
