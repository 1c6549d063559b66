/**
 * A checkpoint as the builder sees it: the model's config and its named tensors. Architecture files
 * `take` each tensor by name and expected shape; a missing or mis-shaped tensor fails with its name and
 * both shapes, and `finish()` fails on tensors nobody took. FasterTransformer's backend filled missing
 * weights with random numbers; Chorus refuses. Tensors read from safetensors files are lazy (see
 * tensor.ts): taking one reads nothing, its values are read when the graph writes them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { READABLE_DTYPES } from './float-bits.ts';
import { readSafetensors, unreadableDtype } from './safetensors.ts';
import { CHUNK_ELEMENTS, elementCount, shapeText, type Tensor } from './tensor.ts';
import { readStateDict } from './torch/state-dict.ts';

/** A Hugging Face `config.json`, as parsed JSON. */
export type ModelConfig = Record<string, unknown>;

/** Tensors by name, each taken at most once. */
export class Checkpoint {
  private readonly taken = new Set<string>();

  constructor(
    /** Where the checkpoint came from, for messages. */
    readonly source: string,
    readonly config: ModelConfig,
    private readonly tensors: Map<string, Tensor>,
  ) {}

  /** Every tensor name. */
  names(): string[] {
    return [...this.tensors.keys()];
  }

  /** True when the checkpoint holds `name`. */
  has(name: string): boolean {
    return this.tensors.has(name);
  }

  /** The tensor `name` as stored, without taking it (for readers that repack a checkpoint's tensors). */
  peek(name: string): Tensor {
    const tensor = this.tensors.get(name);
    if (tensor === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: tensor ${name} is missing`, { param: name });
    return tensor;
  }

  /** The tensor `name`, which must have shape `dims`. */
  take(name: string, dims: readonly number[]): Tensor {
    const tensor = this.tensors.get(name);
    if (tensor === undefined) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: tensor ${name} is missing (expected shape ${shapeText(dims)})`, { param: name });
    }
    if (tensor.dtype !== undefined && !(READABLE_DTYPES as readonly string[]).includes(tensor.dtype)) throw unreadableDtype(this.source, name, tensor.dtype);
    if (tensor.dims.length !== dims.length || tensor.dims.some((d, i) => d !== dims[i])) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: tensor ${name} has shape ${shapeText(tensor.dims)}, expected ${shapeText(dims)}`, {
        param: name,
      });
    }
    this.taken.add(name);
    return tensor;
  }

  /** The number of values of every tensor taken so far. */
  takenElements(): number {
    let sum = 0;
    for (const name of this.taken) sum += elementCount(this.tensors.get(name)!.dims);
    return sum;
  }

  /**
   * For a tied head: some exporters still write the head's copy of the embeddings under `name`. It is
   * taken only if it equals `tiedTo`; a different tensor means the checkpoint is not tied after all.
   */
  takeTiedCopy(name: string, tiedTo: Tensor): void {
    if (!this.has(name)) return;
    if (!sameValues(this.take(name, tiedTo.dims), tiedTo)) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: the head is tied to the embeddings, but ${name} differs from them`, { param: name });
    }
  }

  /** Marks `name` as read on purpose without using it (a buffer saved beside the weights). */
  skip(name: string): void {
    this.taken.add(name);
  }

  /** Fails if any tensor was never taken: an extra tensor means the config and the weights disagree. */
  finish(): void {
    const extra = [...this.tensors.keys()].filter((name) => !this.taken.has(name));
    if (extra.length > 0) {
      const listed = extra.slice(0, 5).map((name) => `${name} ${shapeText(this.tensors.get(name)!.dims)}`);
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: ${extra.length} tensor(s) not used by the architecture: ${listed.join(', ')}${extra.length > 5 ? ', ...' : ''}`);
    }
  }
}

/**
 * Reads a Hugging Face checkpoint directory: config.json and model.safetensors, or shards listed in
 * model.safetensors.index.json; failing those, pytorch_model.bin or the shards listed in
 * pytorch_model.bin.index.json (read without running their pickles, see torch/pickle.ts).
 */
export function readHfCheckpoint(dir: string): Checkpoint {
  const config = readConfig(dir);
  for (const [single, index, read] of [
    ['model.safetensors', 'model.safetensors.index.json', readSafetensors],
    ['pytorch_model.bin', 'pytorch_model.bin.index.json', readStateDict],
  ] as const) {
    if (existsSync(join(dir, single))) return new Checkpoint(dir, config, read(join(dir, single)));
    if (existsSync(join(dir, index))) return new Checkpoint(dir, config, readShards(join(dir, index), dir, read));
  }
  throw new ChorusError('CHORUS_FILE_MISSING', `${dir} has none of model.safetensors, model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json`);
}

/** The parsed config.json of `dir`. */
export function readConfig(dir: string): ModelConfig {
  const configFile = join(dir, 'config.json');
  if (!existsSync(configFile)) throw new ChorusError('CHORUS_FILE_MISSING', `${dir} has no config.json`);
  let config: unknown;
  try {
    config = JSON.parse(readFileSync(configFile, 'utf8'));
  } catch (error) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${configFile} is not valid JSON: ${(error as Error).message}`, { param: 'config.json', cause: error });
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new ChorusError('CHORUS_FILE_INVALID', `${configFile} must hold a JSON object`, { param: 'config.json' });
  return config as ModelConfig;
}

/** The tensors of every shard an index lists; a missing shard is named with a tensor it should hold. */
function readShards(index: string, dir: string, readShard: (file: string) => Map<string, Tensor>): Map<string, Tensor> {
  let weightMap: unknown;
  try {
    weightMap = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: unknown }).weight_map;
  } catch (cause) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${index} is not JSON (${(cause as Error).message})`, { cause });
  }
  if (typeof weightMap !== 'object' || weightMap === null || Object.values(weightMap).some((file) => typeof file !== 'string')) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${index} has no weight_map of tensor names to shard files`);
  }
  const byShard = new Map<string, string[]>();
  for (const [name, shard] of Object.entries(weightMap as Record<string, string>)) byShard.set(shard, [...(byShard.get(shard) ?? []), name]);
  const tensors = new Map<string, Tensor>();
  for (const [shard, names] of byShard) {
    const file = join(dir, shard);
    if (!existsSync(file)) {
      const more = names.length > 1 ? ` and ${names.length - 1} more` : '';
      throw new ChorusError('CHORUS_FILE_MISSING', `${dir}: shard ${shard} is missing; ${basename(index)} lists ${names[0]}${more} in it. Download it again`, { param: shard });
    }
    const held = readShard(file);
    const absent = names.find((name) => !held.has(name));
    if (absent !== undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${index} lists ${absent} in ${shard}, which does not hold it`, { param: absent });
    for (const [name, tensor] of held) tensors.set(name, tensor);
  }
  return tensors;
}

/** True when two tensors of one shape hold the same values (read a piece at a time where they can be). */
function sameValues(a: Tensor, b: Tensor): boolean {
  if (a.read === undefined || b.read === undefined) return sameArrays(a.data, b.data);
  const total = elementCount(a.dims);
  for (let start = 0; start < total; start += CHUNK_ELEMENTS) {
    const count = Math.min(CHUNK_ELEMENTS, total - start);
    if (!sameArrays(a.read(start, count), b.read(start, count))) return false;
  }
  return true;
}

function sameArrays(x: Float32Array, y: Float32Array): boolean {
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}
