/**
 * A checkpoint as the builder sees it: the model's config and its named tensors. Architecture files
 * `take` each tensor by name and expected shape; a missing or mis-shaped tensor fails with its name and
 * both shapes, and `finish()` fails on tensors nobody took. FasterTransformer's backend filled missing
 * weights with random numbers; Chorus refuses.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { readSafetensors } from './safetensors.ts';
import { shapeText, type Tensor } from './tensor.ts';

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

  /** The tensor `name`, which must have shape `dims`. */
  take(name: string, dims: readonly number[]): Tensor {
    const tensor = this.tensors.get(name);
    if (tensor === undefined) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: tensor ${name} is missing (expected shape ${shapeText(dims)})`, { param: name });
    }
    if (tensor.dims.length !== dims.length || tensor.dims.some((d, i) => d !== dims[i])) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${this.source}: tensor ${name} has shape ${shapeText(tensor.dims)}, expected ${shapeText(dims)}`, {
        param: name,
      });
    }
    this.taken.add(name);
    return tensor;
  }

  /**
   * For a tied head: some exporters still write the head's copy of the embeddings under `name`. It is
   * taken only if it equals `tiedTo`; a different tensor means the checkpoint is not tied after all.
   */
  takeTiedCopy(name: string, tiedTo: Tensor): void {
    if (!this.has(name)) return;
    const copy = this.take(name, tiedTo.dims).data;
    if (copy.some((value, i) => value !== tiedTo.data[i])) {
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

/** Reads a Hugging Face checkpoint directory: config.json and model.safetensors, or sharded safetensors. */
export function readHfCheckpoint(dir: string): Checkpoint {
  const configFile = join(dir, 'config.json');
  if (!existsSync(configFile)) throw new ChorusError('CHORUS_FILE_MISSING', `${dir} has no config.json`);
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as ModelConfig;
  const single = join(dir, 'model.safetensors');
  const index = join(dir, 'model.safetensors.index.json');
  let tensors: Map<string, Tensor>;
  if (existsSync(single)) {
    tensors = readSafetensors(single);
  } else if (existsSync(index)) {
    const weightMap = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map;
    tensors = new Map();
    for (const shard of new Set(Object.values(weightMap))) {
      for (const [name, tensor] of readSafetensors(join(dirname(index), shard))) tensors.set(name, tensor);
    }
    const missing = Object.keys(weightMap).filter((name) => !tensors.has(name));
    if (missing.length > 0) throw new ChorusError('CHORUS_FILE_INVALID', `${index} lists ${missing[0]}, which no shard holds`);
  } else {
    throw new ChorusError('CHORUS_FILE_MISSING', `${dir} has neither model.safetensors nor model.safetensors.index.json`);
  }
  return new Checkpoint(dir, config, tensors);
}
