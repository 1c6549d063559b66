/**
 * An engine client with no engines: names given up front, and answers made from the request, so a
 * server's routes can be tested through `app.inject` without models. It records what it was asked.
 */
import { Observable, Subject } from 'rxjs';
import { ChorusError } from '../../src/errors.ts';
import type { EngineClient, ModelInfo, ModelKind, ModelStats, TokenizerInfo, PipelineUpdate, RequestDone, TensorInfo, TensorRecord, TextRequest } from '../../src/serving/index.ts';

const PIPELINE_INPUTS: TensorInfo[] = [{ name: 'text_input', datatype: 'BYTES', shape: [-1, 1], optional: false }];
const PIPELINE_OUTPUTS: TensorInfo[] = [
  { name: 'text_output', datatype: 'BYTES', shape: [-1, -1], optional: false },
  { name: 'prompt_tokens', datatype: 'INT32', shape: [-1, 1], optional: false },
  { name: 'completion_tokens', datatype: 'INT32', shape: [-1, 1], optional: false },
];

export interface FakeEnsemble {
  name: string;
  inputs: TensorInfo[];
  outputs: TensorInfo[];
  /** The outputs for given inputs. Default: each input's tensor under the first output's name. */
  run?: (inputs: TensorRecord) => TensorRecord;
}

export interface FakeOptions {
  pipelines?: string[];
  ensembles?: FakeEnsemble[];
  models?: string[];
  /**
   * The words a pipeline answers (each an update). Default: `max_tokens` words `w0 w1 ...` (4 without it).
   * An error in the list fails the stream there.
   */
  words?: (request: TextRequest) => Array<string | Error>;
  /** Names (of any kind) that run a model on seeded random weights. Default: none. */
  randomWeights?: string[];
}

export class FakeEngineClient implements EngineClient {
  readonly source = 'fake';
  /** Every generate call: the pipeline and the request as the route built it. */
  readonly generated: Array<{ pipeline: string; request: TextRequest }> = [];
  readonly inferred: Array<{ name: string; inputs: TensorRecord; stream: boolean }> = [];
  readonly control: string[] = [];
  /** Streams subscribed and not yet ended or unsubscribed. */
  active = 0;
  /** Streams unsubscribed before they ended. */
  cancelled = 0;
  private readonly done = new Subject<RequestDone>();
  readonly requestsDone = this.done.asObservable();
  private readonly loaded = new Set<string>();

  constructor(private readonly options: FakeOptions = {}) {}

  models(kind?: ModelKind): ModelInfo[] {
    const all: ModelInfo[] = [
      ...(this.options.pipelines ?? []).sort().map((name) => this.info(name, 'pipeline', PIPELINE_INPUTS, PIPELINE_OUTPUTS, { pipeline: { model: name, chat: true } })),
      ...(this.options.ensembles ?? []).map((e) => this.info(e.name, 'ensemble', e.inputs, e.outputs, { steps: [] })),
      ...(this.options.models ?? []).sort().map((name) => this.info(name, 'model', [], [], { model: { engine: 'generate', device: 'cpu' } })),
    ];
    return kind === undefined ? all : all.filter((m) => m.kind === kind);
  }

  resolve(name: string, kinds: readonly ModelKind[] = ['pipeline', 'ensemble', 'model']): ModelInfo {
    for (const kind of kinds) {
      const found = this.models(kind).find((m) => m.name === name);
      if (found !== undefined) return found;
    }
    const names = [...new Set(kinds.flatMap((kind) => this.models(kind).map((m) => m.name)))].sort();
    throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; there are: ${names.join(', ')}`, { param: 'model', value: name });
  }

  generate(pipeline: string, request: TextRequest): Observable<PipelineUpdate> {
    return this.tracked(() => {
      this.resolve(pipeline, ['pipeline']);
      this.generated.push({ pipeline, request });
      const words = this.options.words?.(request) ?? Array.from({ length: request.max_tokens ?? 4 }, (_, i) => `w${i}`);
      const updates: Array<PipelineUpdate | Error> = [];
      let text = '';
      words.forEach((word, i) => {
        if (word instanceof Error) {
          updates.push(word);
          return;
        }
        const delta = i === 0 ? word : ` ${word}`;
        text += delta;
        const logprobs = request.logprobs ? [{ token: i, text: delta, logprob: -1, top: Array.from({ length: request.top_logprobs ?? 0 }, (_, j) => ({ token: j, text: `t${j}`, logprob: -1 - j })) }] : undefined;
        updates.push({ choices: [{ index: 0, text, delta, ...(logprobs ? { logprobs } : {}) }] });
      });
      updates.push({ choices: [{ index: 0, text, delta: '', finishReason: 'length' }], usage: { promptTokens: 3, completionTokens: words.length } });
      return updates;
    });
  }

  infer(name: string, inputs: TensorRecord, options: { stream?: boolean } = {}): Observable<TensorRecord> {
    return this.tracked(() => {
      const info = this.resolve(name, ['ensemble', 'pipeline', 'model']);
      if (info.kind === 'model') throw new ChorusError('CHORUS_UNSUPPORTED', `${name} is a model; infer runs ensembles and pipelines`, { param: 'model' });
      this.inferred.push({ name, inputs, stream: options.stream ?? true });
      if (info.kind === 'pipeline') {
        const text = inputs.text_input?.data[0];
        return [{ text_output: { datatype: 'BYTES', shape: [1, 1], data: [`echo ${String(text)}`] }, prompt_tokens: { datatype: 'INT32', shape: [1, 1], data: [3] }, completion_tokens: { datatype: 'INT32', shape: [1, 1], data: [2] } }];
      }
      const ensemble = this.options.ensembles!.find((e) => e.name === name)!;
      const first = ensemble.outputs[0]!;
      return [ensemble.run?.(inputs) ?? Object.fromEntries(Object.values(inputs).map((t) => [first.name, t]))];
    });
  }

  async load(model: string): Promise<void> {
    this.resolve(model, ['model']);
    this.control.push(`load ${model}`);
    this.loaded.add(model);
  }

  async unload(model: string): Promise<void> {
    this.resolve(model, ['model']);
    this.control.push(`unload ${model}`);
    this.loaded.delete(model);
  }

  async reload(model: string): Promise<void> {
    await this.unload(model);
    await this.load(model);
  }

  stats(): ModelStats[] {
    return [...this.loaded].map((name) => ({ name, running: this.active, waiting: 0, greedySearchRuns: 0, prefillSteps: 2, decodeSteps: 10, decodedRows: 20, requestsFinished: 0, requestsCancelled: this.cancelled, tokensGenerated: 0 }));
  }

  /** A model reports a finished request (for metrics). */
  finish(done: RequestDone): void {
    this.done.next(done);
  }

  async close(): Promise<void> {
    this.done.complete();
  }

  private info(name: string, kind: ModelKind, inputs: TensorInfo[], outputs: TensorInfo[], extra: Partial<ModelInfo>): ModelInfo {
    const state = kind !== 'model' || this.loaded.has(name) ? 'READY' : 'UNAVAILABLE';
    return { name, kind, version: '1', platform: kind === 'model' ? 'chorus_generate' : kind, state, description: null, inputs, outputs, config: { name, platform: kind }, randomWeights: this.randomWeights(name), ...extra };
  }

  randomWeights(name: string): boolean {
    return this.options.randomWeights?.includes(name) ?? false;
  }

  tokenizers(): TokenizerInfo[] {
    return [];
  }

  /** Values made on subscription, one per macrotask, counted while they flow. */
  private tracked<T>(make: () => Array<T | Error>): Observable<T> {
    return new Observable<T>((subscriber) => {
      let values: Array<T | Error>;
      try {
        values = make();
      } catch (error) {
        subscriber.error(error);
        return undefined;
      }
      this.active++;
      let ended = false;
      let at = 0;
      const end = (): void => {
        if (!ended) this.active--;
        ended = true;
      };
      const next = (): void => {
        if (ended) return;
        if (at === values.length) {
          end();
          subscriber.complete();
          return;
        }
        const value = values[at++]!;
        if (value instanceof Error) {
          end();
          subscriber.error(value);
          return;
        }
        subscriber.next(value);
        timer = setImmediate(next);
      };
      let timer = setImmediate(next);
      return () => {
        clearImmediate(timer);
        if (!ended) this.cancelled++;
        end();
      };
    });
  }
}
