/**
 * Model control: the models and tokenizers of one repository, opened on first use (or on `load`) and
 * released on `unload`. A model's source is a built directory, a checkpoint built on first load (and
 * cached), or a Hugging Face id read from the cache, with the definition's `fallback` (seeded random
 * weights of the same architecture) served, loudly, when that id is not there.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ModelDefinition } from '../config/index.ts';
import { ChorusError } from '../errors.ts';
import { OrtEngine, Seq2SeqEngine, type Engine } from '../generation/index.ts';
import { makeCheckpoint } from '../modelbuild/index.ts';
import { builtModelDirectory, cacheDir, fetchSource, isRemote, openTokenizerDefinition, resolveSource, type Repository } from '../repository/index.ts';
import { Seq2SeqSession } from '../runtime/index.ts';
import type { Tokenizer } from '../tokenizers/index.ts';

/** A loaded model: a generation engine, or an encoder session. */
export type LoadedModel =
  | { name: string; engine: 'generate'; generator: Engine; seq2seq: boolean; dir: string }
  | { name: string; engine: 'encode'; encoder: Seq2SeqSession; dir: string };

/** A model's state, as Triton's repository index reports it. */
export type ModelState = 'READY' | 'LOADING' | 'UNAVAILABLE';

export interface ModelStoreOptions {
  /** Where warnings and build progress go. Default: stderr. */
  log?: (line: string) => void;
}

export class ModelStore {
  private readonly models = new Map<string, Promise<LoadedModel>>();
  private readonly ready = new Set<string>();
  private readonly tokenizers = new Map<string, Promise<Tokenizer>>();
  private readonly log: (line: string) => void;

  constructor(
    readonly repository: Repository,
    options: ModelStoreOptions = {},
  ) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
  }

  /** The model, loading it on first use. */
  model(name: string): Promise<LoadedModel> {
    let loading = this.models.get(name);
    if (loading === undefined) {
      loading = this.open(name).then((model) => {
        this.ready.add(name);
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
    const model = await loading.catch(() => undefined);
    if (model === undefined) return;
    if (model.engine === 'generate') await model.generator.close();
    else await model.encoder.close();
  }

  /** Unloads and loads again (picking up new files at the source). */
  async reload(name: string): Promise<void> {
    await this.unload(name);
    await this.load(name);
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
    const dir = await this.directory(name, value);
    const executionProviders = value.device === undefined || value.device === 'cpu' ? ['cpu'] : ['cuda'];
    if (value.engine === 'encode') return { name, engine: 'encode', encoder: await Seq2SeqSession.open(dir, { executionProviders }), dir };
    if (value.engine === 'forward') throw new ChorusError('CHORUS_UNSUPPORTED', `model ${name}: engine forward is not supported yet`, { param: 'engine' });
    const seq2seq = existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
    const generator = seq2seq
      ? await Seq2SeqEngine.open(dir, { executionProviders })
      : await OrtEngine.open(dir, { executionProviders, maxBatchSize: value.max_batch_size, contextLength: value.max_sequence_length });
    return { name, engine: 'generate', generator, seq2seq, dir };
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
    const build = { dtype: value.dtype, task: value.engine === 'encode' ? ('encode' as const) : ('generate' as const), tokenizer: await this.llama2cTokenizerFile(value) };
    const log = (line: string): void => this.log(`model ${name}: ${line}`);
    const path = value.file === undefined ? resolved.path : join(resolved.path, value.file);
    const built = (): string => builtModelDirectory(path, build, log, `model ${name}: ${value.file === undefined ? 'source' : 'file'}`);
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
    const checkpoint = join(cacheDir(), 'fallback', `${fallback.arch}-${fallback.size}-${fallback.seed}`);
    if (!existsSync(join(checkpoint, 'config.json'))) makeCheckpoint({ ...fallback, out: checkpoint });
    return builtModelDirectory(checkpoint, build, log);
  }
}

function prefixed(error: unknown, what: string): unknown {
  return error instanceof ChorusError ? new ChorusError(error.code, `${what}: ${error.message}`, { param: error.param, value: error.value, cause: error }) : error;
}

function notFound(kind: string, name: string, names: Iterable<string>): ChorusError {
  return new ChorusError('CHORUS_NOT_FOUND', `no ${kind} named ${name}; there are: ${[...names].join(', ') || 'none'}`, { param: kind, value: name });
}
