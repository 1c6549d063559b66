/**
 * The engine client over a repository: its pipelines, ensembles and models as a Service runs them
 * (pipelines and ensembles compiled on first use, models loaded on first use or on `load`).
 */
import { defer, map, Subject, type Observable } from 'rxjs';
import type { TensorSpec } from '../config/index.ts';
import { stepKind, type TensorRecord } from '../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../errors.ts';
import { pollRepository, Service, type PipelineUpdate, type PollOptions, type ServiceOptions, type TextRequest } from '../pipeline/index.ts';
import type { EngineClient, ModelInfo, ModelKind, ModelStats, RequestDone, TensorInfo, TokenizerInfo } from './engine-client.ts';

const VERSION = '1';
const ALL_KINDS: readonly ModelKind[] = ['pipeline', 'ensemble', 'model'];

/** A pipeline as a tensor-level model: the text in, the text and token counts out. */
const PIPELINE_INPUTS: TensorInfo[] = [{ name: 'text_input', datatype: 'BYTES', shape: [-1, 1], optional: false }];
const PIPELINE_OUTPUTS: TensorInfo[] = [
  { name: 'text_output', datatype: 'BYTES', shape: [-1, -1], optional: false },
  { name: 'prompt_tokens', datatype: 'INT32', shape: [-1, 1], optional: false },
  { name: 'completion_tokens', datatype: 'INT32', shape: [-1, 1], optional: false },
];

export type RepositoryClientOptions = Omit<ServiceOptions, 'onRequestDone'>;

export class RepositoryClient implements EngineClient {
  /**
   * A client over a service, whose finished requests `requestsDone` reports (what the service's
   * onRequestDone hears). `open` makes both.
   */
  constructor(
    private readonly service: Service,
    readonly requestsDone: Observable<RequestDone>,
  ) {}

  /** Loads and validates the repository at `dir`; every error in it throws, in one message. */
  static open(dir: string, options: RepositoryClientOptions = {}): RepositoryClient {
    const done = new Subject<RequestDone>();
    const service = Service.open(dir, { ...options, onRequestDone: (model, metrics) => done.next({ model, metrics }) });
    return new RepositoryClient(service, done.asObservable());
  }

  /** Loads every model of the repository (what the none and poll control modes do at start). */
  loadAll(): Promise<void> {
    return this.service.loadAll();
  }

  /** Follows the repository's changes (poll control mode) until the returned function is called. */
  poll(options: PollOptions): () => void {
    return pollRepository(this.service, options);
  }

  get source(): string {
    return this.service.repository.dir;
  }

  models(kind?: ModelKind): ModelInfo[] {
    const { repository } = this.service;
    const names: Record<ModelKind, Iterable<string>> = { pipeline: repository.pipelines.keys(), ensemble: repository.ensembles.keys(), model: repository.models.keys() };
    return (kind === undefined ? ALL_KINDS : [kind]).flatMap((k) => [...names[k]].sort().map((name) => this.info(k, name)));
  }

  resolve(name: string, kinds: readonly ModelKind[] = ALL_KINDS): ModelInfo {
    for (const kind of kinds) if (this.has(kind, name)) return this.info(kind, name);
    const names = [...new Set(kinds.flatMap((kind) => this.models(kind).map((m) => m.name)))].sort();
    throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; there are: ${names.join(', ') || 'none'}`, { param: 'model', value: name });
  }

  generate(pipeline: string, request: TextRequest): Observable<PipelineUpdate> {
    return defer(() => this.service.pipeline(this.has('pipeline', pipeline) ? pipeline : this.resolve(pipeline, ['pipeline']).name).run(request));
  }

  infer(name: string, inputs: TensorRecord, options: { stream?: boolean } = {}): Observable<TensorRecord> {
    return defer(() => {
      const { kind } = this.resolve(name, ['ensemble', 'pipeline', 'model']);
      if (kind === 'model') throw new ChorusError('CHORUS_UNSUPPORTED', `${name} is a model; infer runs ensembles and pipelines (a model runs inside an ensemble step)`, { param: 'model' });
      if (kind === 'ensemble') return this.service.ensemble(name).run(inputs, options);
      return this.service.pipeline(name).run(pipelineRequest(inputs, options.stream ?? false)).pipe(map(pipelineOutputs));
    });
  }

  async load(model: string): Promise<void> {
    this.resolve(model, ['model']);
    await this.service.store.load(model);
  }

  async unload(model: string): Promise<void> {
    this.resolve(model, ['model']);
    await this.service.store.unload(model);
  }

  async reload(model: string): Promise<void> {
    this.resolve(model, ['model']);
    await this.service.store.reload(model);
  }

  stats(): ModelStats[] {
    return this.service.store.loadedModels().flatMap((model) => {
      if (model.engine !== 'generate') return [];
      const s = model.generator.stats();
      return [{ name: model.name, running: s.running, waiting: s.waiting, greedySearchRuns: s.greedySearchRuns, prefillSteps: s.prefillSteps, decodeSteps: s.decodeSteps, decodedRows: s.decodedRows, requestsFinished: s.requestsFinished, requestsCancelled: s.requestsCancelled, tokensGenerated: s.tokensGenerated }];
    });
  }

  randomWeights(name: string): boolean {
    return this.service.randomWeights(name).length > 0;
  }

  tokenizers(): TokenizerInfo[] {
    return [...this.service.repository.tokenizers.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([name, d]) => ({ name, type: d.value.type, fallbackInUse: this.service.store.tokenizerFallback(name) ?? null }));
  }

  async close(): Promise<void> {
    await this.service.close();
  }

  private has(kind: ModelKind, name: string): boolean {
    const { repository } = this.service;
    return (kind === 'pipeline' ? repository.pipelines : kind === 'ensemble' ? repository.ensembles : repository.models).has(name);
  }

  private info(kind: ModelKind, name: string): ModelInfo {
    const { repository } = this.service;
    const base = { name, kind, version: VERSION, randomWeights: kind === 'model' ? this.service.store.servesRandomWeights(name) : this.service.randomWeights(name).length > 0 };
    if (kind === 'pipeline') {
      const d = repository.pipelines.get(name)!.value;
      const target = d.ensemble !== undefined ? { ensemble: d.ensemble } : { model: d.model };
      return { ...base, platform: 'pipeline', state: 'READY', description: d.description ?? null, inputs: PIPELINE_INPUTS, outputs: PIPELINE_OUTPUTS, config: { name, platform: kind, ...d }, pipeline: { ...target, chat: d.chat_template !== undefined } };
    }
    if (kind === 'ensemble') {
      const d = repository.ensembles.get(name)!.value;
      const steps = d.steps.map((step) => {
        const k = stepKind(step);
        return { name: step.name, kind: k, target: String(step[k]), inputs: step.inputs, outputs: step.outputs };
      });
      return { ...base, platform: 'ensemble', state: 'READY', description: d.description ?? null, inputs: tensors(d.inputs), outputs: tensors(d.outputs), config: { name, platform: kind, ...d }, steps };
    }
    const d = repository.models.get(name)!.value;
    const state = this.service.store.index().find((m) => m.name === name)?.state ?? 'UNAVAILABLE';
    return { ...base, platform: `chorus_${d.engine}`, state, description: d.description ?? null, inputs: tensors(d.inputs ?? {}), outputs: tensors(d.outputs ?? {}), config: { name, platform: kind, ...d }, model: { engine: d.engine, device: d.device ?? 'cpu' } };
  }
}

function tensors(specs: Record<string, TensorSpec>): TensorInfo[] {
  return Object.entries(specs).map(([name, spec]) => ({ name, datatype: spec.datatype, shape: [-1, ...spec.dims], optional: spec.optional === true }));
}

/** A pipeline's tensors as its text request: `text_input` (one BYTES element) and one-element fields. */
function pipelineRequest(inputs: TensorRecord, stream: boolean): TextRequest {
  const { text_input: text, ...fields } = inputs;
  if (text === undefined || text.datatype !== 'BYTES' || text.data.length !== 1) throw invalidArgument('inputs.text_input', 'one BYTES element (the prompt)', text?.data);
  const request: TextRequest = { text_input: text.data[0] as string, stream };
  for (const [field, t] of Object.entries(fields)) {
    if (t.data.length !== 1) throw invalidArgument(`inputs.${field}`, 'one element (a request field of the pipeline)', t.data);
    request[field] = t.data[0];
  }
  return request;
}

/** A pipeline's update as tensors: every choice's text so far, and the token counts once known. */
function pipelineOutputs(update: PipelineUpdate): TensorRecord {
  const outputs: TensorRecord = { text_output: { datatype: 'BYTES', shape: [1, update.choices.length], data: update.choices.map((c) => c.text) } };
  if (update.usage !== undefined) {
    outputs.prompt_tokens = { datatype: 'INT32', shape: [1, 1], data: [update.usage.promptTokens] };
    outputs.completion_tokens = { datatype: 'INT32', shape: [1, 1], data: [update.usage.completionTokens] };
  }
  return outputs;
}
