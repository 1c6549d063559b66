/**
 * Model control: the models and tokenizers of one repository, opened on first use (or on `load`) and
 * released on `unload`. A model's source is a built directory, a checkpoint built on first load (and
 * cached), or a Hugging Face id read from the cache, with the definition's `fallback` (seeded random
 * weights of the same architecture) served, loudly, when that id is not there.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type ort from 'onnxruntime-node';
import type { ModelDefinition } from '../config/index.ts';
import { ChorusError, notFound } from '../errors.ts';
import { EnginePool, greedySearchWanted, instancePlacements, NativeEngine, nativeRequested, openEngine, runsOnGpu, type Engine, type Placement, type RequestMetrics } from '../generation/index.ts';
import { closeModel, retire } from './close-model.ts';
import { DynamicBatcher, type BatcherOptions } from './dynamic-batcher.ts';
import { encodeBatch, forwardBatch } from './batch-runs.ts';
import { LoadFailures } from './load-failures.ts';
import type { TensorRecord } from './steps/step.ts';
import type { BuildOptions } from '../modelbuild/index.ts';
import { builtModelDirectory, fallbackCheckpoint, isDecoderOnlySource, fetchSource, isRemote, openTokenizerDefinition, resolveSource, type Repository } from '../repository/index.ts';
import { createSession, Seq2SeqSession } from '../runtime/index.ts';
import type { Tokenizer } from '../tokenizers/index.ts';

/** An encode request: token rows (padded to one width) and each row's real length. */
export interface EncodeRequest {
  ids: number[][];
  lengths: number[];
}

/** Hidden states [rows, width, dModel], and per layer the attention probabilities [rows, heads, width, width]. */
export interface EncodeResult {
  hidden: Float32Array;
  dims: [number, number, number];
  attentions: Array<{ data: Float32Array; dims: [number, number, number, number] }>;
}

/** A loaded model: a generation engine, or an encoder behind a dynamic batcher over its instances. */
export type LoadedModel =
  | {
      name: string;
      engine: 'generate';
      generator: Engine;
      seq2seq: boolean;
      dir: string;
      /** The most tokens a request with a prompt of this many tokens may generate. */
      outputRoom: (promptLength: number) => number;
    }
  | { name: string; engine: 'encode'; encode: (request: EncodeRequest) => Promise<EncodeResult>; batcher: DynamicBatcher<EncodeRequest, EncodeResult>; sessions: Seq2SeqSession[]; dir: string }
  | { name: string; engine: 'forward'; run: (inputs: TensorRecord) => Promise<TensorRecord>; batcher: DynamicBatcher<TensorRecord, TensorRecord>; sessions: ort.InferenceSession[]; dir: string };

/**
 * Who loads and unloads models, as Triton's --model-control-mode: `explicit` (models load on first use
 * or by request, and unload by request), `none` (all load at start; requests to load or unload are
 * refused), `poll` (as none, and the repository's changes load, reload and unload models).
 */
export type ModelControlMode = 'none' | 'explicit' | 'poll';

/** A model's state, as Triton's repository index reports it. */
export type ModelState = 'READY' | 'LOADING' | 'UNAVAILABLE';

export interface ModelStoreOptions {
  /** Who loads and unloads models. Default: explicit. */
  control?: ModelControlMode;
  /** Where warnings and build progress go. Default: stderr. */
  log?: (line: string) => void;
  /** Called when a generation request ends, with the model's name and the request's timings. */
  onRequestDone?: (model: string, metrics: RequestMetrics) => void;
  /**
   * Opens a generate model's engine in place of the one its definition and source give (a stand-in
   * engine, to measure or test what runs above the engines); undefined: the usual one. Default: none.
   */
  engine?: (name: string, definition: ModelDefinition, onRequestDone?: (metrics: RequestMetrics) => void) => Engine | undefined;
}

export class ModelStore {
  private readonly models = new Map<string, Promise<LoadedModel>>();
  /** Models whose load finished, for synchronous inspection (metrics). */
  private readonly loaded = new Map<string, LoadedModel>();
  private readonly ready = new Set<string>();
  private readonly failures = new LoadFailures();
  private readonly tokenizers = new Map<string, Promise<Tokenizer>>();
  /** Models whose load decided between their source (false) and their random-weights fallback (true). */
  private readonly random = new Map<string, boolean>();
  /** Tokenizers served by their fallback: name -> the fallback's name. */
  private readonly tokenizerFallbacks = new Map<string, string>();
  private readonly log: (line: string) => void;
  private readonly onRequestDone: ModelStoreOptions['onRequestDone'];
  private readonly standIn: ModelStoreOptions['engine'];
  /** Who loads and unloads models. */
  readonly control: ModelControlMode;

  constructor(
    readonly repository: Repository,
    options: ModelStoreOptions = {},
  ) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.control = options.control ?? 'explicit';
    this.onRequestDone = options.onRequestDone;
    this.standIn = options.engine;
  }

  /** The model, loading it on first use. A failed load answers its error until `load` or a change at the source. */
  model(name: string): Promise<LoadedModel> {
    let loading = this.models.get(name);
    if (loading === undefined) {
      const failed = this.failures.current(name, this.sourcePath(name));
      if (failed !== undefined) return Promise.reject(failed);
      loading = this.open(name).then(
        (model) => {
          this.ready.add(name);
          this.loaded.set(name, model);
          return model;
        },
        (error: unknown) => {
          this.models.delete(name);
          const failure = this.failures.record(name, this.sourcePath(name), error);
          if (failure === undefined) throw error;
          this.log(failure.message);
          throw failure;
        },
      );
      this.models.set(name, loading);
    }
    return loading;
  }

  /** Where a model's files are (its source, resolved; undefined when it cannot be). */
  private sourcePath(name: string): string | undefined {
    const value = this.repository.models.get(name)?.value;
    if (value === undefined) return undefined;
    const resolved = resolveSource(value.source, this.repository.dir);
    if (resolved === undefined) return undefined;
    return value.file === undefined ? resolved.path : join(resolved.path, value.file);
  }

  /** The tokenizer definition `name`, opened once. */
  tokenizer(name: string): Promise<Tokenizer> {
    let opening = this.tokenizers.get(name);
    if (opening === undefined) {
      const definition = this.repository.tokenizers.get(name);
      if (definition === undefined) return Promise.reject(notFound('tokenizer', name, this.repository.tokenizers.keys()));
      const { source, file } = definition.value;
      const resolved = source === undefined ? undefined : resolveSource(source, this.repository.dir);
      const missing = resolved !== undefined && isRemote(resolved) && !existsSync(file === undefined ? resolved.path : join(resolved.path, file));
      const fetching = missing ? fetchSource(resolved, { file, log: (line) => this.log(`tokenizer ${name}: ${line}`) }).catch((error: unknown) => Promise.reject(prefixed(error, `tokenizer ${name}`))) : Promise.resolve();
      opening = fetching
        .then(() => openTokenizerDefinition(name, definition.value, this.repository.dir))
        .catch((error: unknown) => {
          const fallback = definition.value.fallback;
          if (!(error instanceof ChorusError) || error.code !== 'CHORUS_SOURCE_UNAVAILABLE' || fallback === undefined) throw error;
          this.log(`WARNING: ${error.message}; using tokenizer ${fallback} in its place. Its ids are not ${name}'s: fit only for a model on random weights.`);
          this.tokenizerFallbacks.set(name, fallback);
          return this.tokenizer(fallback);
        });
      opening.catch(() => this.tokenizers.delete(name));
      this.tokenizers.set(name, opening);
    }
    return opening;
  }

  /** Loads a model now (a no-op when it is loaded; a model whose load failed is tried again); refused unless the control mode is explicit. */
  async load(name: string): Promise<void> {
    this.byRequest('load', name);
    this.failures.clear(name);
    await this.model(name);
  }

  /**
   * Releases a model's sessions; requests already running on it fail with CHORUS_CLOSED. Refused unless
   * the control mode is explicit.
   */
  async unload(name: string): Promise<void> {
    this.byRequest('unload', name);
    await this.release(name);
  }

  /** Unloads and loads again (picking up new files at the source). */
  async reload(name: string): Promise<void> {
    await this.unload(name);
    await this.load(name);
  }

  /**
   * Opens a loaded model again from its definition and files as they are now, then retires the old one:
   * requests running on it finish there, new ones go to the new one. If opening fails, the old one stays
   * and the error is thrown. A model not loaded is left alone.
   */
  async replace(name: string): Promise<void> {
    const old = this.models.get(name);
    if (old === undefined) return;
    const model = await this.open(name);
    if (this.models.get(name) !== old) {
      await closeModel(model);
      return;
    }
    this.models.set(name, Promise.resolve(model));
    this.loaded.set(name, model);
    this.ready.add(name);
    const previous = await old.catch(() => undefined);
    if (previous !== undefined) await retire(previous);
  }

  /** Forgets a model whose definition is gone: requests running on it finish, then it is closed. */
  async retire(name: string): Promise<void> {
    const model = await this.forget(name);
    if (model !== undefined) await retire(model);
  }

  /** Forgets every opened tokenizer, so the next use reads its definition and files again. */
  forgetTokenizers(): void {
    this.tokenizers.clear();
  }

  private byRequest(action: 'load' | 'unload', name: string): void {
    if (this.control === 'explicit') return;
    throw new ChorusError('CHORUS_UNSUPPORTED', `cannot ${action} ${name}: the model control mode is ${this.control}, where ${this.control === 'poll' ? 'the repository\'s changes' : 'the server\'s start'} decides what is loaded (explicit allows requests)`, { param: 'model', value: name });
  }

  private async release(name: string): Promise<void> {
    if (!this.repository.models.has(name)) throw notFound('model', name, this.repository.models.keys());
    const model = await this.forget(name);
    if (model !== undefined) await closeModel(model);
  }

  /** Drops a model from the store; its load's result, once settled (undefined when none or it failed). */
  private async forget(name: string): Promise<LoadedModel | undefined> {
    const loading = this.models.get(name);
    if (loading === undefined) return undefined;
    this.models.delete(name);
    this.ready.delete(name);
    this.loaded.delete(name);
    return loading.catch(() => undefined);
  }

  /** The loaded models, as they are now. */
  loadedModels(): LoadedModel[] {
    return [...this.loaded.values()];
  }

  /** Every model of the repository and its state. */
  index(): Array<{ name: string; state: ModelState; reason?: string }> {
    return [...this.repository.models.keys()].sort().map((name) => {
      const reason = this.failures.reason(name);
      return { name, state: this.ready.has(name) ? 'READY' : this.models.has(name) ? 'LOADING' : 'UNAVAILABLE', ...(reason === undefined ? {} : { reason }) };
    });
  }

  /**
   * Whether a model serves seeded random weights: decided when it loads; before that, whether it will
   * (its source is not here, its definition has a fallback, and no fetch has been tried yet).
   */
  servesRandomWeights(name: string): boolean {
    const decided = this.random.get(name);
    if (decided !== undefined) return decided;
    const value = this.repository.models.get(name)?.value;
    if (value?.fallback === undefined) return false;
    const resolved = resolveSource(value.source, this.repository.dir);
    if (resolved === undefined || !isRemote(resolved)) return false;
    return !existsSync(value.file === undefined ? join(resolved.path, 'config.json') : join(resolved.path, value.file));
  }

  /** The tokenizer serving in place of `name` (its definition's fallback, once its source proved missing). */
  tokenizerFallback(name: string): string | undefined {
    return this.tokenizerFallbacks.get(name);
  }

  /** Unloads everything. */
  async close(): Promise<void> {
    await Promise.all([...this.models.keys()].map((name) => this.release(name)));
  }

  private async open(name: string): Promise<LoadedModel> {
    const definition = this.repository.models.get(name);
    if (definition === undefined) throw notFound('model', name, this.repository.models.keys());
    const value = definition.value;
    const placements = instancePlacements(value);
    if (value.engine === 'forward') return this.openForward(name, value, placements);
    if (value.engine === 'generate' && this.standIn !== undefined) {
      const hook = this.onRequestDone;
      const engine = this.standIn(name, value, hook === undefined ? undefined : (metrics) => hook(name, metrics));
      const context = value.max_sequence_length ?? 2048;
      if (engine !== undefined) return { name, engine: 'generate', generator: engine, seq2seq: false, dir: '', outputRoom: (prompt) => context - prompt };
    }
    const dir = await this.directory(name, value);
    if (value.engine === 'encode') {
      const sessions: Seq2SeqSession[] = [];
      for (const executionProviders of placements) sessions.push(await Seq2SeqSession.open(dir, { executionProviders }));
      const batcher = new DynamicBatcher<EncodeRequest, EncodeResult>(
        batcherOptions(value, sessions.length),
        (request) => request.ids.length,
        (instance, requests) => encodeBatch(sessions[instance]!, requests),
      );
      return { name, engine: 'encode', encode: (request) => batcher.submit(request), batcher, sessions, dir };
    }
    const seq2seq = existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
    const hook = this.onRequestDone;
    const onRequestDone = hook === undefined ? undefined : (metrics: RequestMetrics): void => hook(name, metrics);
    // One engine per instance (instance_group: count on each device); a pool spreads requests over them.
    const engines: Engine[] = [];
    for (const placement of placements) engines.push(await openEngine(value, dir, placement, { name, log: (line) => this.log(`model ${name}: ${line}`), onRequestDone }));
    const native = engines.some((engine) => engine instanceof NativeEngine);
    const generator = engines.length === 1 ? engines[0]! : new EnginePool(engines);
    return { name, engine: 'generate', generator, seq2seq, dir, outputRoom: outputRoom(dir, value, seq2seq, native) };
  }

  /** A forward model: any ONNX file, tensors in and out by name, behind a dynamic batcher over its instances. */
  private async openForward(name: string, value: ModelDefinition, placements: Placement[]): Promise<LoadedModel> {
    const resolved = resolveSource(value.source, this.repository.dir);
    if (resolved === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: bad source "${value.source}"`, { param: 'source' });
    if (isRemote(resolved) && !existsSync(resolved.path)) await fetchSource(resolved, { file: value.file, log: (line) => this.log(`model ${name}: ${line}`) });
    const base = value.file === undefined ? resolved.path : join(resolved.path, value.file);
    const file = [base, join(base, 'model.onnx'), join(base, 'onnx', 'model.onnx')].find((f) => existsSync(f) && !statSync(f).isDirectory());
    if (file === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `model ${name}: ${base} is not an .onnx file, and holds no model.onnx or onnx/model.onnx`, { param: 'source' });
    const sessions: ort.InferenceSession[] = [];
    for (const executionProviders of placements) sessions.push(await createSession(file, { executionProviders }));
    const batcher = new DynamicBatcher<TensorRecord, TensorRecord>(
      batcherOptions(value, sessions.length),
      (inputs) => Object.values(inputs)[0]?.shape[0] ?? 1,
      (instance, requests) => forwardBatch(sessions[instance]!, requests),
    );
    return { name, engine: 'forward', run: (inputs) => batcher.submit(inputs), batcher, sessions, dir: dirname(file) };
  }

  /** A llama2.c model's build copies its tokenizer.bin: the file of its llama2c tokenizer definition, fetched if need be. */
  private async llama2cTokenizerFile(value: ModelDefinition): Promise<string | undefined> {
    const definition = value.tokenizer === undefined ? undefined : this.repository.tokenizers.get(value.tokenizer);
    if (definition === undefined || definition.value.type !== 'llama2c' || definition.value.source === undefined) return undefined;
    await this.tokenizer(value.tokenizer!);
    const resolved = resolveSource(definition.value.source, this.repository.dir);
    if (resolved === undefined) return undefined;
    const path = definition.value.file === undefined ? resolved.path : join(resolved.path, definition.value.file);
    return existsSync(path) && !statSync(path).isDirectory() ? path : undefined;
  }

  /** The built directory of a model's source (building a checkpoint, or the fallback, when needed). */
  private async directory(name: string, value: ModelDefinition): Promise<string> {
    const resolved = resolveSource(value.source, this.repository.dir);
    if (resolved === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: source must be a path, hf:<org>/<name>[@<revision>] or s3://<bucket>/<prefix>, got "${value.source}"`, { param: 'source' });
    const task = value.engine === 'encode' ? ('encode' as const) : ('generate' as const);
    const tokenizer = await this.llama2cTokenizerFile(value);
    const log = (line: string): void => this.log(`model ${name}: ${line}`);
    const path = value.file === undefined ? resolved.path : join(resolved.path, value.file);
    // The cuda flavor and the GreedySearch model exist for decoder-only models.
    const options = (checkpoint: string): Omit<BuildOptions, 'source' | 'out'> => {
      const decoderOnly = task === 'generate' && isDecoderOnlySource(checkpoint);
      const flavor = value.flavor ?? (decoderOnly && (runsOnGpu(value) || nativeRequested(value)) ? 'cuda' : 'portable');
      return {
        dtype: value.dtype,
        ...(value.weights === undefined ? {} : { weights: value.weights }),
        ...(value.group_size === undefined ? {} : { groupSize: value.group_size }),
        task,
        tokenizer,
        flavor,
        outputAttentions: task === 'encode' && value.output_attentions === true,
        // A split model runs on the native engine only: no GreedySearch model.
        greedySearch: decoderOnly && (value.tensor_parallel ?? 1) === 1 && greedySearchWanted(value),
        slotDecoder: decoderOnly && nativeRequested(value) && flavor === 'cuda',
        ...(value.tensor_parallel === undefined ? {} : { tensorParallel: value.tensor_parallel }),
      };
    };
    const built = async (): Promise<string> => {
      const dir = await builtModelDirectory(path, options(path), log, `model ${name}: ${value.file === undefined ? 'source' : 'file'}`);
      this.random.set(name, false);
      return dir;
    };
    if (resolved.kind === 'local' || existsSync(value.file === undefined ? join(path, 'config.json') : path)) return built();
    let why: string;
    try {
      await fetchSource(resolved, { file: value.file, log });
      return built();
    } catch (error) {
      const fallback = value.fallback;
      if (!(error instanceof ChorusError) || error.code !== 'CHORUS_SOURCE_UNAVAILABLE' || fallback === undefined) throw prefixed(error, `model ${name}`);
      why = error.message;
    }
    const fallback = value.fallback!;
    this.log(`WARNING: model ${name}: ${why}; serving RANDOM weights (${fallback.arch}, ${fallback.size}, seed ${fallback.seed}) instead. Its text is noise.`);
    const checkpoint = await fallbackCheckpoint(fallback, log);
    const dir = await builtModelDirectory(checkpoint, options(checkpoint), log);
    this.random.set(name, true);
    return dir;
  }
}

/** The dynamic batcher of an encode or forward model: its definition's batching, over `instances` sessions. */
function batcherOptions(value: ModelDefinition, instances: number): BatcherOptions {
  const batching = value.dynamic_batching;
  return {
    maxBatchSize: value.max_batch_size ?? 8,
    preferredBatchSizes: batching?.preferred_batch_size,
    maxQueueDelayMicros: batching?.max_queue_delay_microseconds ?? 0,
    instances,
  };
}

/**
 * What a request's output may take: the decoder's context (the definition's max_sequence_length, else
 * the model config's positions; a native engine's slots hold at most 2048, or 512 for an
 * encoder-decoder) less the prompt for a decoder-only model, less the start token for an encoder-decoder.
 */
function outputRoom(dir: string, value: ModelDefinition, seq2seq: boolean, native: boolean): (promptLength: number) => number {
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const positions = Number(config.max_position_embeddings ?? config.n_positions ?? (seq2seq ? 512 : 2048));
  const context = Math.min(value.max_sequence_length ?? positions, native ? (seq2seq ? 512 : 2048) : Infinity);
  return (promptLength) => (seq2seq ? context - 1 : context - promptLength);
}

function prefixed(error: unknown, what: string): unknown {
  return error instanceof ChorusError ? new ChorusError(error.code, `${what}: ${error.message}`, { param: error.param, value: error.value, cause: error }) : error;
}
