/**
 * `chorus make-checkpoint` for the newer decoder families: Llama 3.x, Qwen3, Mistral, Phi-3 and Gemma 2,
 * tiny or at the real shapes of Llama-3.2-1B, Qwen3-1.7B, Mistral-7B-v0.1, Phi-3-mini-4k and
 * Gemma-2-2B. Each tensor is drawn from its own seeded stream while it is written (never held whole),
 * so a 7B checkpoint is written in the memory of one piece.
 */
import { CHUNK_ELEMENTS, elementCount, type Tensor } from './tensor.ts';
import { encodeFloats } from './float-bits.ts';
import { uniformStream } from '../util/random.ts';

export const MODERN_ARCHS = ['llama3', 'qwen3', 'mistral', 'phi3', 'gemma2'] as const;
export type ModernArch = (typeof MODERN_ARCHS)[number];

const LLAMA3_ROPE = { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, rope_type: 'llama3' };

/** config.json of each family and size, as the hub's (the tiny ones keep every feature, in width 64). */
export const MODERN_CONFIGS: Record<ModernArch, Record<'tiny' | 'real', Record<string, unknown>>> = {
  llama3: {
    // Original context 64: the tiny model's frequencies span all three of Llama 3's bands.
    tiny: { architectures: ['LlamaForCausalLM'], model_type: 'llama', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, max_position_embeddings: 512, rope_theta: 500000.0, rope_scaling: { ...LLAMA3_ROPE, original_max_position_embeddings: 64 }, rms_norm_eps: 1e-5, tie_word_embeddings: true, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu', attention_bias: false, mlp_bias: false },
    real: { architectures: ['LlamaForCausalLM'], model_type: 'llama', vocab_size: 128256, hidden_size: 2048, intermediate_size: 8192, num_hidden_layers: 16, num_attention_heads: 32, num_key_value_heads: 8, head_dim: 64, max_position_embeddings: 131072, rope_theta: 500000.0, rope_scaling: { ...LLAMA3_ROPE, original_max_position_embeddings: 8192 }, rms_norm_eps: 1e-5, tie_word_embeddings: true, bos_token_id: 128000, eos_token_id: 128001, hidden_act: 'silu', attention_bias: false, mlp_bias: false },
  },
  qwen3: {
    // head_dim 32 is not hidden / heads, as in Qwen3-0.6B.
    tiny: { architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32, max_position_embeddings: 256, rope_theta: 1000000.0, rms_norm_eps: 1e-6, tie_word_embeddings: true, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu', attention_bias: false, use_sliding_window: false, sliding_window: null },
    real: { architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', vocab_size: 151936, hidden_size: 2048, intermediate_size: 6144, num_hidden_layers: 28, num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, max_position_embeddings: 40960, rope_theta: 1000000.0, rms_norm_eps: 1e-6, tie_word_embeddings: true, bos_token_id: 151643, eos_token_id: 151645, hidden_act: 'silu', attention_bias: false, use_sliding_window: false, sliding_window: null },
  },
  mistral: {
    // A window of 8 bites within a short generation.
    tiny: { architectures: ['MistralForCausalLM'], model_type: 'mistral', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 256, sliding_window: 8, rope_theta: 10000.0, rms_norm_eps: 1e-5, tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu' },
    real: { architectures: ['MistralForCausalLM'], model_type: 'mistral', vocab_size: 32000, hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, max_position_embeddings: 32768, sliding_window: 4096, rope_theta: 10000.0, rms_norm_eps: 1e-5, tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu' },
  },
  phi3: {
    tiny: { architectures: ['Phi3ForCausalLM'], model_type: 'phi3', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 256, original_max_position_embeddings: 256, sliding_window: 255, rope_theta: 10000.0, rope_scaling: null, rms_norm_eps: 1e-5, tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2, pad_token_id: 2, hidden_act: 'silu' },
    real: { architectures: ['Phi3ForCausalLM'], model_type: 'phi3', vocab_size: 32064, hidden_size: 3072, intermediate_size: 8192, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 32, max_position_embeddings: 4096, original_max_position_embeddings: 4096, sliding_window: 2047, rope_theta: 10000.0, rope_scaling: null, rms_norm_eps: 1e-5, tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 32000, pad_token_id: 32000, hidden_act: 'silu' },
  },
  gemma2: {
    tiny: { architectures: ['Gemma2ForCausalLM'], model_type: 'gemma2', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, query_pre_attn_scalar: 16, max_position_embeddings: 256, sliding_window: 8, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0, rope_theta: 10000.0, rms_norm_eps: 1e-6, tie_word_embeddings: true, bos_token_id: 2, eos_token_id: 1, pad_token_id: 0, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh', attention_bias: false, cache_implementation: 'hybrid' },
    real: { architectures: ['Gemma2ForCausalLM'], model_type: 'gemma2', vocab_size: 256000, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8, num_key_value_heads: 4, head_dim: 256, query_pre_attn_scalar: 256, max_position_embeddings: 8192, sliding_window: 4096, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0, rope_theta: 10000.0, rms_norm_eps: 1e-6, tie_word_embeddings: true, bos_token_id: 2, eos_token_id: 1, pad_token_id: 0, hidden_act: 'gelu_pytorch_tanh', hidden_activation: 'gelu_pytorch_tanh', attention_bias: false, cache_implementation: 'hybrid' },
  },
};

/** A 32-bit hash of a tensor's name (FNV-1a), so that each tensor has its own stream whatever the order. */
function nameHash(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Normal samples (Box-Muller) from a seeded uniform stream. */
function normalStream(seed: number): () => number {
  const uniform = uniformStream(seed);
  let spare: number | undefined;
  return () => {
    if (spare !== undefined) {
      const value = spare;
      spare = undefined;
      return value;
    }
    const r = Math.sqrt(-2 * Math.log(uniform()));
    const theta = 2 * Math.PI * uniform();
    spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  };
}

/** A tensor of `mean + scale * N(0, 1)` samples, drawn again from the start each time it is read. */
function randomTensor(dims: number[], seed: number, scale: number, mean: number): Tensor {
  const total = elementCount(dims);
  function* pieces(): Generator<Float32Array> {
    const sample = normalStream(seed);
    for (let start = 0; start < total; start += CHUNK_ELEMENTS) {
      const piece = new Float32Array(Math.min(CHUNK_ELEMENTS, total - start));
      for (let i = 0; i < piece.length; i++) piece[i] = mean + scale * sample();
      yield piece;
    }
  }
  return {
    dims,
    get data() {
      const out = new Float32Array(total);
      let at = 0;
      for (const piece of pieces()) {
        out.set(piece, at);
        at += piece.length;
      }
      return out;
    },
    *encoded(type) {
      for (const piece of pieces()) yield encodeFloats(piece, type);
    },
  };
}

/** The config.json and the (lazy, seeded) tensors of a checkpoint of `arch`. */
export function modernCheckpoint(arch: ModernArch, size: 'tiny' | 'real', seed: number): { config: Record<string, unknown>; tensors: Map<string, Tensor> } {
  const c = MODERN_CONFIGS[arch][size] as Record<string, unknown> & Record<'vocab_size' | 'hidden_size' | 'intermediate_size' | 'num_hidden_layers' | 'num_attention_heads' | 'num_key_value_heads', number>;
  const config = { ...c, torch_dtype: 'float32' };
  // Tiny models get larger weights so their outputs are not near-uniform (greedy ties would be noise).
  const std = size === 'tiny' ? 0.1 : 0.02;
  const tensors = new Map<string, Tensor>();
  const add = (name: string, dims: number[], scale = std, mean = 0): void => void tensors.set(name, randomTensor(dims, (nameHash(name) ^ seed) >>> 0, scale, mean));
  const d = c.hidden_size;
  const headDim = typeof c.head_dim === 'number' ? c.head_dim : d / c.num_attention_heads;
  const [q, kv, inter] = [c.num_attention_heads * headDim, c.num_key_value_heads * headDim, c.intermediate_size];
  // Gemma's RMSNorm scales by 1 + weight: its weights sit around 0, the others' around 1.
  const normMean = arch === 'gemma2' ? 0 : 1;
  const rms = (name: string, width = d): void => add(name, [width], 0.1, normMean);
  add('model.embed_tokens.weight', [c.vocab_size, d]);
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}`;
    rms(`${p}.input_layernorm.weight`);
    rms(`${p}.post_attention_layernorm.weight`);
    if (arch === 'phi3') {
      add(`${p}.self_attn.qkv_proj.weight`, [q + 2 * kv, d]);
      add(`${p}.mlp.gate_up_proj.weight`, [2 * inter, d]);
    } else {
      add(`${p}.self_attn.q_proj.weight`, [q, d]);
      add(`${p}.self_attn.k_proj.weight`, [kv, d]);
      add(`${p}.self_attn.v_proj.weight`, [kv, d]);
      add(`${p}.mlp.gate_proj.weight`, [inter, d]);
      add(`${p}.mlp.up_proj.weight`, [inter, d]);
    }
    add(`${p}.self_attn.o_proj.weight`, [d, q]);
    add(`${p}.mlp.down_proj.weight`, [d, inter]);
    if (arch === 'qwen3') {
      rms(`${p}.self_attn.q_norm.weight`, headDim);
      rms(`${p}.self_attn.k_norm.weight`, headDim);
    }
    if (arch === 'gemma2') {
      rms(`${p}.pre_feedforward_layernorm.weight`);
      rms(`${p}.post_feedforward_layernorm.weight`);
    }
  }
  rms('model.norm.weight');
  if (c.tie_word_embeddings !== true) add('lm_head.weight', [c.vocab_size, d]);
  return { config, tensors };
}
