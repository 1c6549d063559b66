/**
 * Opens a built encoder-decoder (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx) and runs it:
 * encode once, then decoder steps that grow the self-attention cache and reuse the cross-attention one.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { ChorusError } from '../errors.ts';
import { createSession, releaseSession, type ExecutionProviders } from './sessions.ts';
import { argmax } from '../util/argmax.ts';
import { floatData } from '../util/half.ts';
import { refuseBf16 } from './bf16.ts';

/** The encoder's output for a batch: hidden states [batch, seq, dModel] and the mask they came with. */
export interface Encoded {
  hidden: ort.Tensor;
  mask: readonly (readonly number[])[];
  /** Each layer's attention probabilities [batch, heads, seq, seq], when the model was built to output them. */
  attentions: ort.Tensor[];
}

/** Both caches of every decoder layer, as the model returned them; `length` counts decoder tokens. */
export interface Seq2SeqCache {
  tensors: Record<string, ort.Tensor>;
  length: number;
}

/** Logits [batch, seq, vocab] and the grown cache. */
export interface Seq2SeqOutput {
  logits: Float32Array;
  dims: [number, number, number];
  cache: Seq2SeqCache;
}

export class Seq2SeqSession {
  private constructor(
    private readonly encoder: ort.InferenceSession,
    private readonly decoder: ort.InferenceSession | undefined,
    readonly numLayers: number,
    readonly numHeads: number,
    readonly headDim: number,
    readonly vocabSize: number,
    readonly config: Record<string, unknown>,
    /** The cache's (and logits') element type: float16 for an fp16 build. */
    readonly floatType: 'float32' | 'float16' = 'float32',
  ) {}

  /** Opens `dir`; a directory built with task encode has an encoder only. */
  static async open(dir: string, options: { executionProviders?: ExecutionProviders } = {}): Promise<Seq2SeqSession> {
    const encoderFile = join(dir, 'onnx', 'encoder_model.onnx');
    if (!existsSync(encoderFile)) throw new ChorusError('CHORUS_FILE_MISSING', `${dir} holds no onnx/encoder_model.onnx`);
    refuseBf16(dir);
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const sessionOptions = { executionProviders: options.executionProviders ?? ['cpu'] };
    const encoder = await createSession(encoderFile, sessionOptions);
    const decoderFile = join(dir, 'onnx', 'decoder_model_merged.onnx');
    if (!existsSync(decoderFile)) return new Seq2SeqSession(encoder, undefined, 0, 0, 0, 0, config);
    const decoder = await createSession(decoderFile, sessionOptions);
    const layers = decoder.inputNames.filter((n) => /^past_key_values\.\d+\.decoder\.key$/.test(n)).length;
    const past = decoder.inputMetadata.find((m) => m.name === 'past_key_values.0.decoder.key');
    const logits = decoder.outputMetadata.find((m) => m.name === 'logits');
    const [, heads, , headDim] = past !== undefined && past.isTensor ? past.shape : [];
    const vocab = logits !== undefined && logits.isTensor ? logits.shape[2] : undefined;
    if (typeof heads !== 'number' || typeof headDim !== 'number' || typeof vocab !== 'number') {
      throw new ChorusError('CHORUS_FILE_INVALID', `${decoderFile}: the cache's heads and head size, and the vocabulary size, must be fixed dimensions`);
    }
    return new Seq2SeqSession(encoder, decoder, layers, heads, headDim, vocab, config, past!.isTensor && past!.type === 'float16' ? 'float16' : 'float32');
  }

  /** Runs the encoder over rows of equal length (mask: 1 real, 0 padding; default all ones). */
  async encode(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[]): Promise<Encoded> {
    const mask = attentionMask ?? inputIds.map((row) => row.map(() => 1));
    const dims = [inputIds.length, inputIds[0]?.length ?? 0];
    const out = await this.encoder.run({ input_ids: int64(inputIds, dims), attention_mask: int64(mask, dims) });
    const attentions = this.encoder.outputNames.filter((name) => name.startsWith('attentions.')).map((name) => out[name]!);
    return { hidden: out.last_hidden_state!, mask, attentions };
  }

  /** One decoder step: `inputIds` are the new decoder tokens; without a cache, cross-attention is computed. */
  async step(encoded: Encoded, inputIds: readonly (readonly number[])[], cache?: Seq2SeqCache): Promise<Seq2SeqOutput> {
    const decoder = this.decoderSession();
    const batch = inputIds.length;
    const seq = inputIds[0]?.length ?? 0;
    const feeds: Record<string, ort.Tensor> = {
      encoder_attention_mask: int64(encoded.mask, [batch, encoded.mask[0]?.length ?? 0]),
      input_ids: int64(inputIds, [batch, seq]),
      encoder_hidden_states: encoded.hidden,
      use_cache_branch: new ort.Tensor('bool', Uint8Array.of(cache === undefined ? 0 : 1), [1]),
    };
    const empty = new ort.Tensor(this.floatType, this.floatType === 'float16' ? new Uint16Array(0) : new Float32Array(0), [batch, this.numHeads, 0, this.headDim]);
    for (let i = 0; i < this.numLayers; i++) {
      for (const part of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) {
        feeds[`past_key_values.${i}.${part}`] = cache?.tensors[`past_key_values.${i}.${part}`] ?? empty;
      }
    }
    const out = await decoder.run(feeds);
    const tensors: Record<string, ort.Tensor> = {};
    for (let i = 0; i < this.numLayers; i++) {
      for (const part of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) tensors[`past_key_values.${i}.${part}`] = out[`present.${i}.${part}`]!;
    }
    return { logits: floatData(out.logits!), dims: [batch, seq, this.vocabSize], cache: { tensors, length: (cache?.length ?? 0) + seq } };
  }

  /** Greedy decoding of one input for `steps` tokens, from `decoder_start_token_id` (no stopping). */
  async greedy(inputIds: readonly number[], steps: number): Promise<number[]> {
    const encoded = await this.encode([inputIds]);
    const start = Number(this.config.decoder_start_token_id ?? 0);
    const ids: number[] = [];
    let out = await this.step(encoded, [[start]]);
    for (let i = 0; i < steps; i++) {
      const next = argmax(out.logits, (out.dims[1] - 1) * this.vocabSize, this.vocabSize);
      ids.push(next);
      if (i + 1 < steps) out = await this.step(encoded, [[next]], out.cache);
    }
    return ids;
  }

  async close(): Promise<void> {
    await releaseSession(this.encoder);
    if (this.decoder !== undefined) await releaseSession(this.decoder);
  }

  private decoderSession(): ort.InferenceSession {
    if (this.decoder === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', 'this model was built with task encode: it has no decoder');
    return this.decoder;
  }
}

function int64(rows: readonly (readonly number[])[], dims: number[]): ort.Tensor {
  return new ort.Tensor('int64', BigInt64Array.from(rows.flat(), (v) => BigInt(v)), dims);
}
