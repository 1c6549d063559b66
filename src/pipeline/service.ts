/**
 * A repository brought to life: its definitions validated (with source overrides applied), a model
 * store for model control, and its ensembles and pipelines compiled on first use. What `chorus serve`,
 * `generate --pipeline` and `infer` run.
 */
import { formatDiagnostic } from '../config/index.ts';
import { CompiledEnsemble, ModelStore, type ModelStoreOptions } from '../ensemble/index.ts';
import { ChorusError, notFound } from '../errors.ts';
import { loadRepository, type Repository, type SourceOverride } from '../repository/index.ts';
import { Pipeline } from './pipeline.ts';

export interface ServiceOptions {
  sourceOverrides?: readonly SourceOverride[];
  /** Warnings and progress. Default: stderr. */
  log?: (line: string) => void;
  /** Each finished generation request's model and timings (for metrics). */
  onRequestDone?: ModelStoreOptions['onRequestDone'];
}

export class Service {
  private readonly pipelines = new Map<string, Pipeline>();
  private readonly ensembles = new Map<string, CompiledEnsemble>();

  private constructor(
    readonly repository: Repository,
    readonly store: ModelStore,
  ) {}

  /**
   * Loads and validates `dir`; errors throw, all of them in one message. Warnings (sources not in the
   * cache) are `chorus validate`'s to show; the store warns loudly when it serves a fallback.
   */
  static open(dir: string, options: ServiceOptions = {}): Service {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const { repository, diagnostics } = loadRepository(dir, { sourceOverrides: options.sourceOverrides });
    const errors = diagnostics.filter((d) => d.severity === 'error');
    if (errors.length > 0) throw new ChorusError('CHORUS_CONFIG_INVALID', `repository ${dir} has ${errors.length} error(s):\n${errors.map(formatDiagnostic).join('\n')}`);
    return new Service(repository, new ModelStore(repository, { log, onRequestDone: options.onRequestDone }));
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
