/**
 * A repository brought to life: its definitions validated (with source overrides applied), a model
 * store for model control, and its ensembles and pipelines compiled on first use. What `chorus serve`,
 * `generate --pipeline` and `infer` run. `refresh` reads the repository again and applies what changed
 * (Triton's poll mode).
 */
import { formatDiagnostic } from '../config/index.ts';
import { CompiledEnsemble, ModelStore, type ModelControlMode, type ModelStoreOptions } from '../ensemble/index.ts';
import { ChorusError, notFound } from '../errors.ts';
import { loadRepository, type Repository, type SourceOverride } from '../repository/index.ts';
import { Pipeline } from './pipeline.ts';
import { modelChanges, modelFingerprints, type RepositoryChanges } from './repository-diff.ts';

export interface ServiceOptions {
  sourceOverrides?: readonly SourceOverride[];
  /** Warnings and progress. Default: stderr. */
  log?: (line: string) => void;
  /** Each finished generation request's model and timings (for metrics). */
  onRequestDone?: ModelStoreOptions['onRequestDone'];
  /** Who loads and unloads models (Triton's --model-control-mode). Default: explicit. */
  control?: ModelControlMode;
  /** Engines in place of the generate models' own (ModelStoreOptions.engine). Default: none. */
  engine?: ModelStoreOptions['engine'];
}

export class Service {
  private readonly pipelines = new Map<string, Pipeline>();
  private readonly ensembles = new Map<string, CompiledEnsemble>();

  private fingerprints: Map<string, string>;

  private constructor(
    readonly repository: Repository,
    readonly store: ModelStore,
    private readonly options: ServiceOptions,
  ) {
    this.fingerprints = modelFingerprints(repository);
  }

  /**
   * Loads and validates `dir`; errors throw, all of them in one message. Warnings (sources not in the
   * cache) are `chorus validate`'s to show; the store warns loudly when it serves a fallback.
   */
  static open(dir: string, options: ServiceOptions = {}): Service {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const { repository, diagnostics } = loadRepository(dir, { sourceOverrides: options.sourceOverrides });
    const errors = diagnostics.filter((d) => d.severity === 'error');
    if (errors.length > 0) throw new ChorusError('CHORUS_CONFIG_INVALID', `repository ${dir} has ${errors.length} error(s):\n${errors.map(formatDiagnostic).join('\n')}`);
    return new Service(repository, new ModelStore(repository, { log, onRequestDone: options.onRequestDone, control: options.control, engine: options.engine }), { ...options, log });
  }

  /** Loads every model of the repository (what the none and poll control modes do at start). */
  async loadAll(): Promise<void> {
    await Promise.all([...this.repository.models.keys()].map((name) => this.store.model(name)));
  }

  /**
   * Reads the repository again and applies what changed: every definition is replaced, a loaded model
   * whose definition or files changed is opened anew (requests running on the old one finish there),
   * one removed is closed once idle, and in poll mode a new one is loaded. A repository that no longer
   * validates is left as it was, and the errors thrown.
   */
  async refresh(): Promise<RepositoryChanges> {
    const { repository: next, diagnostics } = loadRepository(this.repository.dir, { sourceOverrides: this.options.sourceOverrides });
    const errors = diagnostics.filter((d) => d.severity === 'error');
    if (errors.length > 0) throw new ChorusError('CHORUS_CONFIG_INVALID', `repository ${this.repository.dir} has ${errors.length} error(s); keeping the last good one:\n${errors.map(formatDiagnostic).join('\n')}`);
    const { changes, fingerprints } = modelChanges(this.fingerprints, next);
    for (const kind of ['tokenizers', 'models', 'ensembles', 'pipelines'] as const) {
      const map = this.repository[kind] as Map<string, unknown>;
      map.clear();
      for (const [name, definition] of next[kind]) map.set(name, definition);
    }
    this.repository.broken = next.broken;
    this.fingerprints = fingerprints;
    this.pipelines.clear();
    this.ensembles.clear();
    this.store.forgetTokenizers();
    await Promise.all([
      ...changes.changed.map((name) => this.store.replace(name)),
      ...changes.removed.map((name) => this.store.retire(name)),
      ...(this.store.control === 'poll' ? changes.added.map((name) => this.store.model(name)) : []),
    ]);
    return changes;
  }

  pipeline(name: string): Pipeline {
    return compiled(this.pipelines, this.repository.pipelines, 'pipeline', name, (value) => new Pipeline(name, value, this.store));
  }

  ensemble(name: string): CompiledEnsemble {
    return compiled(this.ensembles, this.repository.ensembles, 'ensemble', name, (value) => new CompiledEnsemble(name, value, this.store));
  }

  /** The models a pipeline, ensemble or model of this name runs (none for an unknown name). */
  modelsOf(name: string): string[] {
    const pipeline = this.repository.pipelines.get(name)?.value;
    if (pipeline?.model !== undefined) return [pipeline.model];
    const ensemble = this.repository.ensembles.get(pipeline?.ensemble ?? name)?.value;
    if (ensemble !== undefined) {
      const targets = ensemble.steps.flatMap((step) => [step.generate, step.encode, step.forward]).filter((m): m is string => m !== undefined);
      return [...new Set(targets)];
    }
    return this.repository.models.has(name) ? [name] : [];
  }

  /** Of those models, the ones serving seeded random weights (see ModelStore.servesRandomWeights). */
  randomWeights(name: string): string[] {
    return this.modelsOf(name).filter((model) => this.store.servesRandomWeights(model));
  }

  async close(): Promise<void> {
    await this.store.close();
  }
}

/** The compiled form of a named definition, made on first use and kept. */
function compiled<D, C>(cache: Map<string, C>, definitions: Map<string, { value: D }>, kind: string, name: string, make: (value: D) => C): C {
  let made = cache.get(name);
  if (made === undefined) {
    const definition = definitions.get(name);
    if (definition === undefined) throw notFound(kind, name, definitions.keys());
    made = make(definition.value);
    cache.set(name, made);
  }
  return made;
}
