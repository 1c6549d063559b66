/**
 * Model control: the models and tokenizers of one repository, opened on first use (or on `load`) and
 * released on `unload`. A model's source is a built directory, a checkpoint built on first load (and
 * cached), or a Hugging Face id read from the cache, with the definition's `fallback` (seeded random
 * weights of the same architecture) served, loudly, when that id is not there.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type ort from 'onnxruntime-node';
import type { ModelDefinition } from '../config/index.ts';
import { ChorusError, notFound } from '../errors.ts';
import { EnginePool, NativeEngine, nativeUnavailable, OrtEngine, Seq2SeqEngine, type Engine, type RequestMetrics } from '../generation/index.ts';
import { loadNative } from '../native/index.ts';
import { DynamicBatcher, type BatcherOptions } from './dynamic-batcher.ts';
import { fromOrt, toOrt } from './ort-tensors.ts';
import type { TensorRecord } from './steps/step.ts';
import type { BuildOptions } from '../modelbuild/index.ts';
import { builtModelDirectory, fallbackCheckpoint, isDecoderOnlySource, fetchSource, isRemote, openTokenizerDefinition, resolveSource, type Repository } from '../repository/index.ts';
import { createSession, releaseSession, Seq2SeqSession, type ExecutionProviders } from '../runtime/index.ts';
import type { Tokenizer } from '../tokenizers/index.ts';
import { floatData } from '../util/half.ts';

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
  | { name: string; engine: 'generate'; generator: Engine; seq2seq: boolean; dir: string }
  | { name: string; engine: 'encode'; encode: (request: EncodeRequest) => Promise<EncodeResult>; batcher: DynamicBatcher<EncodeRequest, EncodeResult>; sessions: Seq2SeqSession[]; dir: string }
  | { name: string; engine: 'forward'; run: (inputs: TensorRecord) => Promise<TensorRecord>; batcher: DynamicBatcher<TensorRecord, TensorRecord>; sessions: ort.InferenceSession[]; dir: string };

/** A model's state, as Triton's repository index reports it. */
export type ModelState = 'READY' | 'LOADING' | 'UNAVAILABLE';

export interface ModelStoreOptions {
  /** Where warnings and build progress go. Default: stderr. */
  log?: (line: string) => void;
  /** Called when a generation request ends, with the model's name and the request's timings. */
  onRequestDone?: (model: string, metrics: RequestMetrics) => void;
}

export class ModelStore {
  private readonly models = new Map<string, Promise<LoadedModel>>();
  /** Models whose load finished, for synchronous inspection (metrics). */
  private readonly loaded = new Map<string, LoadedModel>();
  private readonly ready = new Set<string>();
  private readonly tokenizers = new Map<string, Promise<Tokenizer>>();
  private readonly log: (line: string) => void;
  private readonly onRequestDone: ModelStoreOptions['onRequestDone'];

  constructor(
    readonly repository: Repository,
    options: ModelStoreOptions = {},
  ) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.onRequestDone = options.onRequestDone;
  }

  /** The model, loading it on first use. */
  model(name: string): Promise<LoadedModel> {
    let loading = this.models.get(name);
    if (loading === undefined) {
      loading = this.open(name).then((model) => {
        this.ready.add(name);
        this.loaded.set(name, model);
        return model;
      });
      // A failed load is forgotten, so the next use tries again.
      loading.catch(() => this.models.delete(name));
      this.models.set(name, loading);
    }
    return loading;
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
      const fetching = missing ? fetchSource(resolved, { file, log: (line) => this.log(`tokenizer ${name}: ${line}`) }) : Promise.resolve();
      opening = fetching.then(() => openTokenizerDefinition(name, definition.value, this.repository.dir));
      opening.catch(() => this.tokenizers.delete(name));
      this.tokenizers.set(name, opening);
    }
    return opening;
  }

  /** Loads a model now (a no-op when it is loaded). */
  async load(name: string): Promise<void> {
    await this.model(name);
  }

  /** Releases a model's sessions; requests already running on it fail with CHORUS_CLOSED. */
  async unload(name: string): Promise<void> {
    if (!this.repository.models.has(name)) throw notFound('model', name, this.repository.models.keys());
    const loading = this.models.get(name);
    if (loading === undefined) return;
    this.models.delete(name);
    this.ready.delete(name);
    this.loaded.delete(name);
    const model = await loading.catch(() => undefined);
    if (model === undefined) return;
    if (model.engine === 'generate') await model.generator.close();
    else if (model.engine === 'encode') {
      model.batcher.close();
      await Promise.all(model.sessions.map((s) => s.close()));
    } else {
      model.batcher.close();
      await Promise.all(model.sessions.map((s) => releaseSession(s)));
    }
  }

  /** Unloads and loads again (picking up new files at the source). */
  async reload(name: string): Promise<void> {
    await this.unload(name);
    await this.load(name);
  }

  /** The loaded models, as they are now. */
  loadedModels(): LoadedModel[] {
    return [...this.loaded.values()];
  }

  /** Every model of the repository and its state. */
  index(): Array<{ name: string; state: ModelState }> {
    return [...this.repository.models.keys()].sort().map((name) => ({ name, state: this.ready.has(name) ? 'READY' : this.models.has(name) ? 'LOADING' : 'UNAVAILABLE' }));
  }

  /** Unloads everything. */
  async close(): Promise<void> {
    await Promise.all([...this.models.keys()].map((name) => this.unload(name)));
  }

  private async open(name: string): Promise<LoadedModel> {
    const definition = this.repository.models.get(name);
    if (definition === undefined) throw notFound('model', name, this.repository.models.keys());
    const value = definition.value;
    const placements = instancePlacements(value);
    if (value.engine === 'forward') return this.openForward(name, value, placements);
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
    const native = nativeWanted(value, dir, (line) => this.log(`model ${name}: ${line}`));
    if (!native && value.cuda_options !== undefined) {
      throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: cuda_options are passed by the native engine only (onnxruntime-node's own binding takes a device id alone); build it with npm run build:native`, { param: 'cuda_options' });
    }
    if (!native && value.batch_invariant === true) {
      throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${name}: batch_invariant needs the native engine (the TypeScript engine's steps take as many rows as run); build it with npm run build:native`, { param: 'batch_invariant' });
    }
    const engines: Engine[] = [];
    for (const providers of placements) {
      const gpu = gpuOf(providers);
      engines.push(
        seq2seq && !native
          ? await Seq2SeqEngine.open(dir, { executionProviders: providers, maxBatchSize: value.max_batch_size, onRequestDone })
          : native
            ? await NativeEngine.open(dir, {
                provider: gpu === undefined ? 'cpu' : 'cuda',
                deviceId: gpu?.deviceId ?? 0,
                maxBatchSize: value.max_batch_size,
                maxQueue: value.max_queue,
                contextLength: value.max_sequence_length,
                cudaGraph: value.cuda_graph ?? true,
                batchInvariant: value.batch_invariant ?? false,
                ...(value.cuda_options === undefined ? {} : { cudaOptions: value.cuda_options }),
                onRequestDone,
              })
          : await OrtEngine.open(dir, {
              executionProviders: providers,
              maxBatchSize: value.max_batch_size,
              maxQueue: value.max_queue,
              contextLength: value.max_sequence_length,
              greedySearch: greedySearchWanted(value),
              onRequestDone,
            }),
      );
    }
    const generator = engines.length === 1 ? engines[0]! : new EnginePool(engines);
    return { name, engine: 'generate', generator, seq2seq, dir };
  }

  /** A forward model: any ONNX file, tensors in and out by name, behind a dynamic batcher over its instances. */
  private async openForward(name: string, value: ModelDefinition, placements: ExecutionProviders[]): Promise<LoadedModel> {
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
      const flavor = value.flavor ?? (decoderOnly && (runsOnGpu(value) || value.native_engine === true) ? 'cuda' : 'portable');
      return {
        dtype: value.dtype,
        task,
        tokenizer,
        flavor,
        greedySearch: decoderOnly && greedySearchWanted(value),
        slotDecoder: decoderOnly && nativeRequested(value) && flavor === 'cuda',
      };
    };
    const built = (): Promise<string> => builtModelDirectory(path, options(path), log, `model ${name}: ${value.file === undefined ? 'source' : 'file'}`);
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
    return builtModelDirectory(checkpoint, options(checkpoint), log);
  }
}

/**
 * Runs requests together: concatenated along the batch dimension when every input has the same
 * trailing shape in all of them, else one after another; each gets its own rows back.
 */
async function forwardBatch(session: ort.InferenceSession, requests: TensorRecord[]): Promise<TensorRecord[]> {
  const run = async (inputs: TensorRecord): Promise<TensorRecord> => {
    const feeds = Object.fromEntries(Object.entries(inputs).map(([port, t]) => [port, toOrt(t, port)]));
    const out = await session.run(feeds);
    return Object.fromEntries(Object.entries(out).map(([port, t]) => [port, fromOrt(t)]));
  };
  const names = Object.keys(requests[0]!);
  const stackable = requests.length > 1 && names.every((n) => requests.every((r) => r[n] !== undefined && r[n].datatype === requests[0]![n]!.datatype && r[n].shape.slice(1).join() === requests[0]![n]!.shape.slice(1).join()));
  if (!stackable) {
    const outputs: TensorRecord[] = [];
    for (const r of requests) outputs.push(await run(r));
    return outputs;
  }
  const merged = Object.fromEntries(
    names.map((n) => {
      const first = requests[0]![n]!;
      return [n, { datatype: first.datatype, shape: [requests.reduce((sum, r) => sum + r[n]!.shape[0]!, 0), ...first.shape.slice(1)], data: requests.flatMap((r) => r[n]!.data) }];
    }),
  ) as TensorRecord;
  const out = await run(merged);
  let row = 0;
  return requests.map((r) => {
    const rows = r[names[0]!]!.shape[0]!;
    const mine = Object.fromEntries(
      Object.entries(out).map(([port, t]) => {
        const size = t.shape.slice(1).reduce((a, b) => a * b, 1);
        return [port, { datatype: t.datatype, shape: [rows, ...t.shape.slice(1)], data: t.data.slice(row * size, (row + rows) * size) }];
      }),
    ) as TensorRecord;
    row += rows;
    return mine;
  });
}

/** Runs requests as one padded batch and gives each its own rows back, at its own width. */
async function encodeBatch(session: Seq2SeqSession, requests: EncodeRequest[]): Promise<EncodeResult[]> {
  const width = Math.max(...requests.map((r) => Math.max(0, ...r.ids.map((row) => row.length))));
  const ids = requests.flatMap((r) => r.ids.map((row) => [...row, ...Array<number>(width - row.length).fill(0)]));
  const masks = requests.flatMap((r) => r.lengths.map((length) => Array.from({ length: width }, (_, i) => (i < length ? 1 : 0))));
  const encoded = await session.encode(ids, masks);
  // An fp16 build's hidden states are widened to float32 here, once.
  const hidden = floatData(encoded.hidden);
  const d = encoded.hidden.dims[2]!;
  let row = 0;
  return requests.map((request) => {
    const w = Math.max(0, ...request.ids.map((r) => r.length));
    const rows = request.ids.length;
    const out = new Float32Array(rows * w * d);
    for (let r = 0; r < rows; r++) out.set(hidden.subarray((row + r) * width * d, ((row + r) * width + w) * d), r * w * d);
    const attentions = encoded.attentions.map((layer) => {
      const heads = layer.dims[1]!;
      const data = new Float32Array(rows * heads * w * w);
      const source = floatData(layer);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < heads; h++) {
          for (let q = 0; q < w; q++) {
            const from = (((row + r) * heads + h) * width + q) * width;
            data.set(source.subarray(from, from + w), ((r * heads + h) * w + q) * w);
          }
        }
      }
      return { data, dims: [rows, heads, w, w] as [number, number, number, number] };
    });
    row += rows;
    return { hidden: out, dims: [rows, w, d] as [number, number, number], attentions };
  });
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

/** An execution provider list per instance: `instance_group` counts on cpu or on each listed GPU; else one on `device`. */
type Providers = ExecutionProviders;
/** Whether any instance of the model runs on a GPU. */
function runsOnGpu(value: ModelDefinition): boolean {
  return instancePlacements(value).some((providers) => gpuOf(providers) !== undefined);
}

/** The CUDA provider of an instance's list, if it has one. */
function gpuOf(providers: Providers): { deviceId?: number } | undefined {
  for (const p of providers) if ((typeof p === 'string' ? p : p.name) === 'cuda') return typeof p === 'string' ? {} : (p as { deviceId?: number });
  return undefined;
}

/** greedy_search, defaulting to true on GPUs. */
function greedySearchWanted(value: ModelDefinition): boolean {
  return value.greedy_search ?? runsOnGpu(value);
}

/** Whether the definition asks for the native engine: native_engine, else a GPU with the engine built. */
function nativeRequested(value: ModelDefinition): boolean {
  return value.native_engine ?? (runsOnGpu(value) && loadNative().addon !== undefined);
}

/**
 * Whether a generate model runs on the native engine: when asked and the built directory allows it.
 * native_engine: true fails, saying why, when it cannot; the default falls back with a notice on GPUs.
 */
function nativeWanted(value: ModelDefinition, dir: string, log: (line: string) => void): boolean {
  if (value.native_engine === false) return false;
  const unavailable = nativeUnavailable(dir);
  if (value.native_engine === true) {
    if (unavailable !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', unavailable, { param: 'native_engine' });
    return true;
  }
  if (!runsOnGpu(value)) return false;
  if (unavailable !== undefined) log(`the TypeScript engine serves it: ${unavailable}`);
  return unavailable === undefined;
}

export function instancePlacements(value: ModelDefinition): Providers[] {
  const device = value.device ?? 'cpu';
  const defaultGpu = device.startsWith('cuda') ? Number(device.split(':')[1] ?? 0) : 0;
  const on = (kind: 'cpu' | 'gpu', gpu: number): Providers => (kind === 'cpu' ? ['cpu'] : [{ name: 'cuda', deviceId: gpu }]);
  const defaultKind = device === 'cpu' ? 'cpu' : 'gpu';
  if (value.instance_group === undefined) return [on(defaultKind, defaultGpu)];
  return value.instance_group.flatMap((group) => {
    const kind = group.kind ?? defaultKind;
    const gpus = kind === 'gpu' ? (group.gpus ?? [defaultGpu]) : [0];
    return gpus.flatMap((gpu) => Array.from({ length: group.count ?? 1 }, () => on(kind, gpu)));
  });
}

function prefixed(error: unknown, what: string): unknown {
  return error instanceof ChorusError ? new ChorusError(error.code, `${what}: ${error.message}`, { param: error.param, value: error.value, cause: error }) : error;
}
