/**
 * `chorus make-checkpoint`: a random, seeded checkpoint in the Hugging Face format (config.json +
 * model.safetensors) for tests and benchmarks. The same seed gives the same bytes.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { invalidArgument } from '../errors.ts';
import { writeSafetensors } from './safetensors.ts';
import type { Tensor } from './tensor.ts';

export const CHECKPOINT_ARCHS = ['gpt2', 'llama', 'qwen2'] as const;
export type CheckpointArch = (typeof CHECKPOINT_ARCHS)[number];
export type CheckpointSize = 'tiny' | 'real';

/** Options of `makeCheckpoint`. */
export interface MakeCheckpointOptions {
  arch: CheckpointArch;
  /** `tiny`: a few layers of width 64; `real`: GPT-2 124M, or Qwen2-0.5B's shape for llama and qwen2. */
  size: CheckpointSize;
  seed: number;
  out: string;
}

const CONFIGS: Record<CheckpointArch, Record<CheckpointSize, Record<string, unknown>>> = {
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

/** A seeded generator of normal samples (mulberry32 uniforms, Box-Muller). */
class Normal {
  private state: number;
  private spare: number | undefined;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  private uniform(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
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
  if (!CHECKPOINT_ARCHS.includes(arch)) throw invalidArgument('arch', CHECKPOINT_ARCHS.join(', '), arch);
  if (size !== 'tiny' && size !== 'real') throw invalidArgument('size', 'tiny or real', size);
  if (!Number.isSafeInteger(seed) || seed < 0) throw invalidArgument('seed', 'a non-negative integer', seed);
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
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  writeSafetensors(join(out, 'model.safetensors'), tensors);
  return config;
}
