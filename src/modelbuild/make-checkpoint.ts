/**
 * `chorus make-checkpoint`: a random, seeded checkpoint in the Hugging Face format (config.json +
 * model.safetensors) for tests and benchmarks. The same seed gives the same bytes.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { invalidArgument } from '../errors.ts';
import { makeDirectory } from '../util/output-dir.ts';
import { uniformStream } from '../util/random.ts';
import { writeSafetensors } from './safetensors.ts';
import type { Tensor } from './tensor.ts';
import { MODERN_ARCHS, MODERN_CONFIGS, modernCheckpoint, type ModernArch } from './make-modern-checkpoint.ts';

export const CHECKPOINT_ARCHS = ['gpt2', 'llama', 'qwen2', 't5', 't5v1_1', 'ul2', 'bart', 'mbart', ...MODERN_ARCHS] as const;
export type CheckpointArch = (typeof CHECKPOINT_ARCHS)[number];
/** `base` is a second real size, for the T5 variants (t5-base, t5-v1_1-base); `large` is bart-large. */
export type CheckpointSize = 'tiny' | 'real' | 'base' | 'large';

/** Options of `makeCheckpoint`. */
export interface MakeCheckpointOptions {
  arch: CheckpointArch;
  /**
   * `tiny`: a few layers of width 64; `base`: t5-base and t5-v1_1-base (T5 variants only); `large`: bart-large; `real`: GPT-2 124M, Qwen2-0.5B's shape (llama, qwen2), t5-small,
   * t5-v1_1-small, UL2's gated-SiLU at t5-v1_1-small's size, bart-base, and mBART's architecture at
   * bart-base's size with mBART's 250027 vocabulary; Llama-3.2-1B (llama3), Qwen3-1.7B, Mistral-7B-v0.1,
   * Phi-3-mini-4k and Gemma-2-2B.
   */
  size: CheckpointSize;
  seed: number;
  out: string;
  /** The stored element type. Default: fp32. */
  dtype?: CheckpointDtype;
}

/** The element types a checkpoint is written in. */
export const CHECKPOINT_DTYPES = { fp32: 'F32', fp16: 'F16', bf16: 'BF16' } as const;
export type CheckpointDtype = keyof typeof CHECKPOINT_DTYPES;
const TORCH_DTYPES: Record<CheckpointDtype, string> = { fp32: 'float32', fp16: 'float16', bf16: 'bfloat16' };

const CONFIGS: Record<CheckpointArch, Partial<Record<CheckpointSize, Record<string, unknown>>> & Record<'tiny' | 'real', Record<string, unknown>>> = {
  ...MODERN_CONFIGS,
  ul2: {
    tiny: { vocab_size: 512, d_model: 64, d_kv: 16, d_ff: 96, num_layers: 2, num_decoder_layers: 2, num_heads: 4, feed_forward_proj: 'gated-silu', tie_word_embeddings: false },
    real: { vocab_size: 32128, d_model: 512, d_kv: 64, d_ff: 1024, num_layers: 8, num_decoder_layers: 8, num_heads: 6, feed_forward_proj: 'gated-silu', tie_word_embeddings: false },
  },
  bart: {
    tiny: { vocab_size: 512, d_model: 64, encoder_layers: 2, decoder_layers: 2, encoder_attention_heads: 4, decoder_attention_heads: 4, encoder_ffn_dim: 128, decoder_ffn_dim: 128, max_position_embeddings: 128, scale_embedding: false },
    real: { vocab_size: 50265, d_model: 768, encoder_layers: 6, decoder_layers: 6, encoder_attention_heads: 12, decoder_attention_heads: 12, encoder_ffn_dim: 3072, decoder_ffn_dim: 3072, max_position_embeddings: 1024, scale_embedding: false },
    large: { vocab_size: 50265, d_model: 1024, encoder_layers: 12, decoder_layers: 12, encoder_attention_heads: 16, decoder_attention_heads: 16, encoder_ffn_dim: 4096, decoder_ffn_dim: 4096, max_position_embeddings: 1024, scale_embedding: false },
  },
  mbart: {
    tiny: { vocab_size: 512, d_model: 64, encoder_layers: 2, decoder_layers: 3, encoder_attention_heads: 4, decoder_attention_heads: 4, encoder_ffn_dim: 128, decoder_ffn_dim: 128, max_position_embeddings: 128, scale_embedding: true },
    real: { vocab_size: 250027, d_model: 768, encoder_layers: 6, decoder_layers: 6, encoder_attention_heads: 12, decoder_attention_heads: 12, encoder_ffn_dim: 3072, decoder_ffn_dim: 3072, max_position_embeddings: 1024, scale_embedding: true },
  },
  t5: {
    tiny: { vocab_size: 512, d_model: 64, d_kv: 16, d_ff: 128, num_layers: 2, num_decoder_layers: 2, num_heads: 4, feed_forward_proj: 'relu', tie_word_embeddings: true },
    real: { vocab_size: 32128, d_model: 512, d_kv: 64, d_ff: 2048, num_layers: 6, num_decoder_layers: 6, num_heads: 8, feed_forward_proj: 'relu', tie_word_embeddings: true },
    base: { vocab_size: 32128, d_model: 768, d_kv: 64, d_ff: 3072, num_layers: 12, num_decoder_layers: 12, num_heads: 12, feed_forward_proj: 'relu', tie_word_embeddings: true },
  },
  t5v1_1: {
    tiny: { vocab_size: 512, d_model: 64, d_kv: 16, d_ff: 96, num_layers: 2, num_decoder_layers: 3, num_heads: 4, feed_forward_proj: 'gated-gelu', tie_word_embeddings: false },
    real: { vocab_size: 32128, d_model: 512, d_kv: 64, d_ff: 1024, num_layers: 8, num_decoder_layers: 8, num_heads: 6, feed_forward_proj: 'gated-gelu', tie_word_embeddings: false },
    base: { vocab_size: 32128, d_model: 768, d_kv: 64, d_ff: 2048, num_layers: 12, num_decoder_layers: 12, num_heads: 12, feed_forward_proj: 'gated-gelu', tie_word_embeddings: false },
  },
  gpt2: {
    tiny: { vocab_size: 512, n_embd: 64, n_layer: 2, n_head: 4, n_positions: 128 },
    real: { vocab_size: 50257, n_embd: 768, n_layer: 12, n_head: 12, n_positions: 1024 },
  },
  llama: {
    tiny: { vocab_size: 512, hidden_size: 64, intermediate_size: 172, num_hidden_layers: 2, num_attention_heads: 8, num_key_value_heads: 4, max_position_embeddings: 256, tie_word_embeddings: false },
    real: { vocab_size: 151936, hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, max_position_embeddings: 32768, tie_word_embeddings: true, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
  },
  qwen2: {
    tiny: { vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 256, tie_word_embeddings: true, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
    real: { vocab_size: 151936, hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, max_position_embeddings: 32768, tie_word_embeddings: true, rope_theta: 1000000.0, rms_norm_eps: 1e-6 },
  },
};

/** A seeded generator of normal samples (Box-Muller over a seeded uniform stream). */
class Normal {
  private readonly uniform: () => number;
  private spare: number | undefined;
  constructor(seed: number) {
    this.uniform = uniformStream(seed);
  }
  sample(): number {
    if (this.spare !== undefined) {
      const value = this.spare;
      this.spare = undefined;
      return value;
    }
    const r = Math.sqrt(-2 * Math.log(this.uniform()));
    const theta = 2 * Math.PI * this.uniform();
    this.spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}

/** Writes the checkpoint; returns its config. */
export function makeCheckpoint(options: MakeCheckpointOptions): Record<string, unknown> {
  const { arch, size, seed, out } = options;
  const dtype = options.dtype ?? 'fp32';
  if (!CHECKPOINT_ARCHS.includes(arch)) throw invalidArgument('arch', CHECKPOINT_ARCHS.join(', '), arch);
  const sizes = Object.keys(CONFIGS[arch] ?? {});
  if (!sizes.includes(size)) throw invalidArgument('size', `one of ${sizes.join(', ')} for ${arch}`, size);
  if (!Number.isSafeInteger(seed) || seed < 0) throw invalidArgument('seed', 'a non-negative integer', seed);
  if (!Object.hasOwn(CHECKPOINT_DTYPES, dtype)) throw invalidArgument('dtype', Object.keys(CHECKPOINT_DTYPES).join(', '), dtype);
  if ((MODERN_ARCHS as readonly string[]).includes(arch)) {
    const { config, tensors } = modernCheckpoint(arch as ModernArch, size as 'tiny' | 'real', seed);
    return writeCheckpoint(out, { ...config, torch_dtype: TORCH_DTYPES[dtype] }, tensors, dtype);
  }
  const rng = new Normal(seed);
  // Tiny models get larger weights so their outputs are not near-uniform (greedy ties would be noise).
  const std = size === 'tiny' ? 0.1 : 0.02;
  const normal = (dims: number[], scale = std, mean = 0): Tensor => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) data[i] = mean + scale * rng.sample();
    return { dims, data };
  };
  const tensors = new Map<string, Tensor>();
  let config: Record<string, unknown>;
  if (arch === 'gpt2') {
    const c = CONFIGS.gpt2[size] as { vocab_size: number; n_embd: number; n_layer: number; n_positions: number };
    config = { architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', activation_function: 'gelu_new', layer_norm_epsilon: 1e-5, n_ctx: c.n_positions, bos_token_id: c.vocab_size - 1, eos_token_id: c.vocab_size - 1, tie_word_embeddings: true, torch_dtype: 'float32', ...c };
    const d = c.n_embd;
    tensors.set('transformer.wte.weight', normal([c.vocab_size, d]));
    tensors.set('transformer.wpe.weight', normal([c.n_positions, d], 0.01));
    const layerNorm = (name: string): void => {
      tensors.set(`${name}.weight`, normal([d], 0.1, 1));
      tensors.set(`${name}.bias`, normal([d], 0.02));
    };
    const conv = (name: string, inDim: number, outDim: number): void => {
      tensors.set(`${name}.weight`, normal([inDim, outDim]));
      tensors.set(`${name}.bias`, normal([outDim], 0.02));
    };
    for (let i = 0; i < c.n_layer; i++) {
      const p = `transformer.h.${i}`;
      layerNorm(`${p}.ln_1`);
      conv(`${p}.attn.c_attn`, d, 3 * d);
      conv(`${p}.attn.c_proj`, d, d);
      layerNorm(`${p}.ln_2`);
      conv(`${p}.mlp.c_fc`, d, 4 * d);
      conv(`${p}.mlp.c_proj`, 4 * d, d);
    }
    layerNorm('transformer.ln_f');
  } else if (arch === 'bart' || arch === 'mbart') {
    const c = CONFIGS[arch][size] as { vocab_size: number; d_model: number; encoder_layers: number; decoder_layers: number; encoder_ffn_dim: number; max_position_embeddings: number };
    config = {
      architectures: [arch === 'mbart' ? 'MBartForConditionalGeneration' : 'BartForConditionalGeneration'],
      model_type: arch,
      activation_function: 'gelu',
      is_encoder_decoder: true,
      bos_token_id: 0,
      pad_token_id: 1,
      eos_token_id: 2,
      decoder_start_token_id: 2,
      forced_bos_token_id: arch === 'bart' ? 0 : null,
      forced_eos_token_id: 2,
      tie_word_embeddings: true,
      torch_dtype: 'float32',
      ...c,
    };
    const d = c.d_model;
    const ffn = c.encoder_ffn_dim;
    const linear = (name: string, outDim: number, inDim: number): void => {
      tensors.set(`${name}.weight`, normal([outDim, inDim]));
      tensors.set(`${name}.bias`, normal([outDim], 0.02));
    };
    const layerNorm = (name: string): void => {
      tensors.set(`${name}.weight`, normal([d], 0.1, 1));
      tensors.set(`${name}.bias`, normal([d], 0.02));
    };
    const attention = (p: string): void => {
      for (const x of ['q_proj', 'k_proj', 'v_proj', 'out_proj']) linear(`${p}.${x}`, d, d);
    };
    tensors.set('model.shared.weight', normal([c.vocab_size, d]));
    for (const stack of ['encoder', 'decoder'] as const) {
      tensors.set(`model.${stack}.embed_positions.weight`, normal([c.max_position_embeddings + 2, d]));
      layerNorm(`model.${stack}.layernorm_embedding`);
      if (arch === 'mbart') layerNorm(`model.${stack}.layer_norm`);
      for (let i = 0; i < (stack === 'encoder' ? c.encoder_layers : c.decoder_layers); i++) {
        const p = `model.${stack}.layers.${i}`;
        attention(`${p}.self_attn`);
        layerNorm(`${p}.self_attn_layer_norm`);
        if (stack === 'decoder') {
          attention(`${p}.encoder_attn`);
          layerNorm(`${p}.encoder_attn_layer_norm`);
        }
        linear(`${p}.fc1`, ffn, d);
        linear(`${p}.fc2`, d, ffn);
        layerNorm(`${p}.final_layer_norm`);
      }
    }
    tensors.set('final_logits_bias', normal([1, c.vocab_size], 0.1));
  } else if (arch === 't5' || arch === 't5v1_1' || arch === 'ul2') {
    const c = CONFIGS[arch][size] as { vocab_size: number; d_model: number; d_kv: number; d_ff: number; num_layers: number; num_decoder_layers: number; num_heads: number; tie_word_embeddings: boolean };
    const gated = arch !== 't5';
    const act = arch === 'ul2' ? 'silu' : 'gelu_new';
    config = {
      architectures: ['T5ForConditionalGeneration'],
      model_type: 't5',
      relative_attention_num_buckets: 32,
      relative_attention_max_distance: 128,
      layer_norm_epsilon: 1e-6,
      is_encoder_decoder: true,
      decoder_start_token_id: 0,
      pad_token_id: 0,
      eos_token_id: 1,
      ...(gated ? { dense_act_fn: act, is_gated_act: true } : { dense_act_fn: 'relu', is_gated_act: false }),
      torch_dtype: 'float32',
      ...c,
    };
    const d = c.d_model;
    const inner = c.num_heads * c.d_kv;
    const linear = (name: string, outDim: number, inDim: number): void => void tensors.set(`${name}.weight`, normal([outDim, inDim]));
    const attention = (p: string, relative: boolean): void => {
      for (const x of ['q', 'k', 'v']) linear(`${p}.${x}`, inner, d);
      linear(`${p}.o`, d, inner);
      if (relative) tensors.set(`${p}.relative_attention_bias.weight`, normal([32, c.num_heads], 0.5));
    };
    const feedForward = (p: string): void => {
      if (gated) {
        linear(`${p}.wi_0`, c.d_ff, d);
        linear(`${p}.wi_1`, c.d_ff, d);
      } else {
        linear(`${p}.wi`, c.d_ff, d);
      }
      linear(`${p}.wo`, d, c.d_ff);
    };
    const rms = (name: string): void => void tensors.set(`${name}.weight`, normal([d], 0.1, 1));
    // Small enough that the residual stream is not just the input token's embedding (a tied head would
    // then predict the token it was given, over and over).
    tensors.set('shared.weight', normal([c.vocab_size, d], 0.2));
    for (let i = 0; i < c.num_layers; i++) {
      const p = `encoder.block.${i}.layer`;
      rms(`${p}.0.layer_norm`);
      attention(`${p}.0.SelfAttention`, i === 0);
      rms(`${p}.1.layer_norm`);
      feedForward(`${p}.1.DenseReluDense`);
    }
    rms('encoder.final_layer_norm');
    for (let i = 0; i < c.num_decoder_layers; i++) {
      const p = `decoder.block.${i}.layer`;
      rms(`${p}.0.layer_norm`);
      attention(`${p}.0.SelfAttention`, i === 0);
      rms(`${p}.1.layer_norm`);
      attention(`${p}.1.EncDecAttention`, false);
      rms(`${p}.2.layer_norm`);
      feedForward(`${p}.2.DenseReluDense`);
    }
    rms('decoder.final_layer_norm');
    if (!c.tie_word_embeddings) tensors.set('lm_head.weight', normal([c.vocab_size, d]));
  } else {
    const c = CONFIGS[arch][size] as { vocab_size: number; hidden_size: number; intermediate_size: number; num_hidden_layers: number; num_attention_heads: number; num_key_value_heads: number; tie_word_embeddings: boolean };
    config = {
      architectures: [arch === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
      model_type: arch,
      hidden_act: 'silu',
      rms_norm_eps: 1e-5,
      rope_theta: 10000.0,
      bos_token_id: 1,
      eos_token_id: 2,
      torch_dtype: 'float32',
      ...(arch === 'llama' ? { attention_bias: false, mlp_bias: false } : {}),
      ...c,
    };
    const d = c.hidden_size;
    const headDim = d / c.num_attention_heads;
    const kv = c.num_key_value_heads * headDim;
    const bias = arch === 'qwen2';
    const linear = (name: string, outDim: number, inDim: number, withBias = false): void => {
      tensors.set(`${name}.weight`, normal([outDim, inDim]));
      if (withBias) tensors.set(`${name}.bias`, normal([outDim], 0.02));
    };
    tensors.set('model.embed_tokens.weight', normal([c.vocab_size, d]));
    for (let i = 0; i < c.num_hidden_layers; i++) {
      const p = `model.layers.${i}`;
      tensors.set(`${p}.input_layernorm.weight`, normal([d], 0.1, 1));
      linear(`${p}.self_attn.q_proj`, d, d, bias);
      linear(`${p}.self_attn.k_proj`, kv, d, bias);
      linear(`${p}.self_attn.v_proj`, kv, d, bias);
      linear(`${p}.self_attn.o_proj`, d, d);
      tensors.set(`${p}.post_attention_layernorm.weight`, normal([d], 0.1, 1));
      linear(`${p}.mlp.gate_proj`, c.intermediate_size, d);
      linear(`${p}.mlp.up_proj`, c.intermediate_size, d);
      linear(`${p}.mlp.down_proj`, d, c.intermediate_size);
    }
    tensors.set('model.norm.weight', normal([d], 0.1, 1));
    if (!c.tie_word_embeddings) tensors.set('lm_head.weight', normal([c.vocab_size, d]));
  }
  return writeCheckpoint(out, { ...config, torch_dtype: TORCH_DTYPES[dtype] }, tensors, dtype);
}

function writeCheckpoint(out: string, config: Record<string, unknown>, tensors: Map<string, Tensor>, dtype: CheckpointDtype): Record<string, unknown> {
  makeDirectory(out, 'out');
  writeFileSync(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  writeSafetensors(join(out, 'model.safetensors'), tensors, { dtype: CHECKPOINT_DTYPES[dtype] });
  return config;
}
