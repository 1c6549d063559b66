/**
 * Opens a built decoder (the Optimum / transformers.js layout) with onnxruntime-node and runs it:
 * a prefill over whole prompts, then decode steps that feed the returned key/value cache back.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { ChorusError } from '../errors.ts';
import { createSession, releaseSession, type ExecutionProviders } from './sessions.ts';
import { argmax } from '../util/argmax.ts';
import { widenHalf } from '../util/half.ts';
import { refuseBf16 } from './bf16.ts';

/** The key/value cache of every layer, as the model returned it. */
export interface KvCache {
  tensors: Record<string, ort.Tensor>;
  /** Tokens already in the cache (the past length). */
  length: number;
}

/** One forward pass's inputs: rows of equal length (left-pad with any id and mask it out). */
export interface DecoderStep {
  inputIds: readonly (readonly number[])[];
  /** [batch, past + seq]: 1 for real tokens, 0 for padding. Default: all ones. */
  attentionMask?: readonly (readonly number[])[];
  /** [batch, seq]. Default: counted from the attention mask (padding does not advance positions). */
  positionIds?: readonly (readonly number[])[];
  /** The cache from the previous step. Default: empty (a prefill). */
  cache?: KvCache;
  /** Return only each row's last position's logits (dims [batch, 1, vocab]): what a prefill needs. Default: false. */
  lastOnly?: boolean;
}

/** Logits [batch, seq, vocab] as float32, and the grown cache. */
export interface DecoderOutput {
  logits: Float32Array;
  dims: [number, number, number];
  cache: KvCache;
}

/** A decoder model directory opened for inference. */
export class DecoderSession {
  private constructor(
    private readonly session: ort.InferenceSession,
    readonly numLayers: number,
    readonly numKvHeads: number,
    readonly headDim: number,
    readonly vocabSize: number,
    readonly floatType: 'float32' | 'float16',
    readonly config: Record<string, unknown>,
  ) {}

  /** Opens `dir/onnx/decoder_model_merged.onnx` on `executionProviders` (default: cpu). */
  static async open(dir: string, options: { executionProviders?: ExecutionProviders } = {}): Promise<DecoderSession> {
    const file = join(dir, 'onnx', 'decoder_model_merged.onnx');
    if (!existsSync(file)) throw new ChorusError('CHORUS_FILE_MISSING', `${dir} holds no onnx/decoder_model_merged.onnx`);
    refuseBf16(dir);
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const session = await createSession(file, { executionProviders: options.executionProviders ?? ['cpu'] });
    const pastKeys = session.inputNames.filter((name) => /^past_key_values\.\d+\.key$/.test(name));
    const metadata = session.inputMetadata.find((m) => m.name === 'past_key_values.0.key');
    if (pastKeys.length === 0 || metadata === undefined || !metadata.isTensor) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${file} has no past_key_values inputs: not a decoder with a key/value cache`);
    }
    const [, kvHeads, , headDim] = metadata.shape;
    const logits = session.outputMetadata.find((m) => m.name === 'logits');
    const vocab = logits !== undefined && logits.isTensor ? logits.shape[2] : undefined;
    if (typeof kvHeads !== 'number' || typeof headDim !== 'number' || typeof vocab !== 'number') {
      throw new ChorusError('CHORUS_FILE_INVALID', `${file}: the cache's heads and head size, and the vocabulary size, must be fixed dimensions`);
    }
    const floatType = metadata.type === 'float16' ? 'float16' : 'float32';
    return new DecoderSession(session, pastKeys.length, kvHeads, headDim, vocab, floatType, config);
  }

  /** An empty cache for `batch` rows. */
  emptyCache(batch: number): KvCache {
    const tensors: Record<string, ort.Tensor> = {};
    const empty = this.floatType === 'float16' ? new Uint16Array(0) : new Float32Array(0);
    for (let i = 0; i < this.numLayers; i++) {
      for (const part of ['key', 'value']) tensors[`past_key_values.${i}.${part}`] = new ort.Tensor(this.floatType, empty, [batch, this.numKvHeads, 0, this.headDim]);
    }
    return { tensors, length: 0 };
  }

  /** Runs one forward pass. */
  async run(step: DecoderStep): Promise<DecoderOutput> {
    const batch = step.inputIds.length;
    const seq = step.inputIds[0]?.length ?? 0;
    if (batch === 0 || seq === 0 || step.inputIds.some((row) => row.length !== seq)) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', 'inputIds must be a non-empty batch of non-empty rows of equal length');
    }
    const cache = step.cache ?? this.emptyCache(batch);
    const total = cache.length + seq;
    const mask = step.attentionMask ?? step.inputIds.map(() => Array<number>(total).fill(1));
    const positions = step.positionIds ?? mask.map((row) => positionsFromMask(row).slice(cache.length));
    const feeds: Record<string, ort.Tensor> = {
      input_ids: int64Tensor(step.inputIds, [batch, seq]),
      attention_mask: int64Tensor(mask, [batch, total]),
      position_ids: int64Tensor(positions, [batch, seq]),
      ...cache.tensors,
    };
    const results = await this.session.run(feeds);
    const present: Record<string, ort.Tensor> = {};
    for (let i = 0; i < this.numLayers; i++) {
      for (const part of ['key', 'value']) present[`past_key_values.${i}.${part}`] = results[`present.${i}.${part}`]!;
    }
    const logits = results.logits!;
    const V = this.vocabSize;
    const rows = step.lastOnly ? 1 : seq;
    let data: Float32Array;
    if (logits.type !== 'float16' && !step.lastOnly) data = logits.data as Float32Array;
    else {
      // Copy (and widen fp16) only the positions asked for: a prefill's all-position logits can be gigabytes.
      data = new Float32Array(batch * rows * V);
      const source = logits.data as Float32Array | Uint16Array;
      const half = logits.type === 'float16';
      for (let b = 0; b < batch; b++) {
        for (let r = 0; r < rows; r++) {
          const from = (b * seq + (seq - rows + r)) * V;
          const to = (b * rows + r) * V;
          if (half) widenHalf((source as Uint16Array).subarray(from, from + V), data, to);
          else data.set((source as Float32Array).subarray(from, from + V), to);
        }
      }
    }
    return { logits: data, dims: [batch, rows, V], cache: { tensors: present, length: total } };
  }

  /** Greedy decoding of one prompt for `steps` tokens (no stopping): the generated ids. */
  async greedy(prompt: readonly number[], steps: number): Promise<number[]> {
    const out: number[] = [];
    let output = await this.run({ inputIds: [prompt] });
    for (let i = 0; i < steps; i++) {
      const next = argmax(output.logits, (output.dims[1] - 1) * this.vocabSize, this.vocabSize);
      out.push(next);
      if (i + 1 < steps) output = await this.run({ inputIds: [[next]], cache: output.cache });
    }
    return out;
  }

  /** Frees the session. */
  async close(): Promise<void> {
    await releaseSession(this.session);
  }
}

/** Position of each token: the count of real tokens before it (padding gets 1, as transformers does). */
export function positionsFromMask(mask: readonly number[]): number[] {
  let seen = 0;
  return mask.map((m) => (m === 0 ? 1 : seen++));
}


function int64Tensor(rows: readonly (readonly number[])[], dims: number[]): ort.Tensor {
  return new ort.Tensor('int64', BigInt64Array.from(rows.flat(), (v) => BigInt(v)), dims);
}
