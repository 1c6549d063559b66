/**
 * Tiny seeded Mistral and Gemma 2 checkpoints in the Hugging Face layout, with small sliding windows
 * and soft caps that bite within a few dozen tokens.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type Tensor } from '../../src/modelbuild/index.ts';
import { uniformStream } from '../../src/util/random.ts';

export type WindowArch = 'mistral' | 'gemma2';

const CONFIGS: Record<WindowArch, Record<string, unknown>> = {
  mistral: {
    architectures: ['MistralForCausalLM'], model_type: 'mistral', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, hidden_act: 'silu', max_position_embeddings: 256, rms_norm_eps: 1e-5,
    rope_theta: 10000, sliding_window: 8, tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2, torch_dtype: 'float32',
  },
  gemma2: {
    architectures: ['Gemma2ForCausalLM'], model_type: 'gemma2', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 3,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32, hidden_activation: 'gelu_pytorch_tanh', max_position_embeddings: 256,
    rms_norm_eps: 1e-6, rope_theta: 10000, sliding_window: 8, query_pre_attn_scalar: 24, attn_logit_softcapping: 2, final_logit_softcapping: 8,
    attention_bias: false, tie_word_embeddings: true, bos_token_id: 2, eos_token_id: 1, pad_token_id: 0, torch_dtype: 'float32',
  },
};

/** Writes config.json and model.safetensors for `arch` (its config changed by `overrides`) under `out`; returns the config. */
export function writeWindowCheckpoint(arch: WindowArch, seed: number, out: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const config = { ...CONFIGS[arch], ...overrides };
  const uniform = uniformStream(seed);
  const normal = (dims: number[], scale: number, mean = 0): Tensor => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) data[i] = mean + scale * Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
    return { dims, data };
  };
  const n = (key: string): number => config[key] as number;
  const [d, heads, kvHeads, headDim, ffn] = [n('hidden_size'), n('num_attention_heads'), n('num_key_value_heads'), n('head_dim'), n('intermediate_size')];
  // Gemma's norms scale by 1 + weight: their weights sit around 0.
  const normMean = arch === 'gemma2' ? 0 : 1;
  const tensors = new Map<string, Tensor>([['model.embed_tokens.weight', normal([n('vocab_size'), d], arch === 'gemma2' ? 0.05 : 0.5)]]);
  const norms = arch === 'gemma2' ? ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm'] : ['input_layernorm', 'post_attention_layernorm'];
  for (let i = 0; i < n('num_hidden_layers'); i++) {
    const p = `model.layers.${i}`;
    for (const name of norms) tensors.set(`${p}.${name}.weight`, normal([d], 0.1, normMean));
    for (const [name, dims] of [['q_proj', [heads * headDim, d]], ['k_proj', [kvHeads * headDim, d]], ['v_proj', [kvHeads * headDim, d]], ['o_proj', [d, heads * headDim]]] as const) {
      tensors.set(`${p}.self_attn.${name}.weight`, normal([...dims], 0.15));
    }
    for (const [name, dims] of [['gate_proj', [ffn, d]], ['up_proj', [ffn, d]], ['down_proj', [d, ffn]]] as const) tensors.set(`${p}.mlp.${name}.weight`, normal([...dims], 0.15));
  }
  tensors.set('model.norm.weight', normal([d], 0.1, normMean));
  if (config.tie_word_embeddings !== true) tensors.set('lm_head.weight', normal([n('vocab_size'), d], 0.15));
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  writeSafetensors(join(out, 'model.safetensors'), tensors);
  return config;
}
