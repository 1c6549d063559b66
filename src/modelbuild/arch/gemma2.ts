/**
 * Gemma 2: GeGLU (tanh GELU), four RMSNorms per layer (input, post-attention, pre- and post-feedforward)
 * whose scale is 1 + weight, embeddings scaled by sqrt(hidden), attention and final logit soft-capping,
 * sliding-window attention on alternate layers (the even ones, or as `layer_types` says), attention
 * scaled by query_pre_attn_scalar^-0.5, a head_dim of its own, the head tied to the embeddings.
 */
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint.ts';
import { bool, oneOf, positiveInt, positiveNumber } from '../config-fields.ts';
import type { DecoderSpec, DecoderWeights, Linear, Norm } from '../decoder-spec.ts';
import { transpose2d, type Tensor } from '../tensor.ts';
import type { DecoderArchitecture } from './architecture.ts';
import { slidingWindow } from './sliding-window.ts';

/** The rotary base: `rope_theta`, or transformers 5's `rope_parameters`; scaled rotary types are refused. */
function ropeTheta(config: ModelConfig): number {
  for (const key of ['rope_parameters', 'rope_scaling']) {
    const value = config[key];
    if (value === undefined || value === null) continue;
    const params = (typeof value === 'object' ? value : {}) as Record<string, unknown>;
    const type = params.rope_type ?? params.type ?? 'default';
    if (typeof value !== 'object' || type !== 'default') {
      throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: ${key} of type ${describe(type)} is not supported for gemma2; only plain rotary embeddings (rope_type default) are`, { param: key });
    }
    if (params.rope_theta !== undefined) return positiveNumber(params, 'rope_theta');
  }
  return positiveNumber(config, 'rope_theta', 10000);
}

/** A soft cap: a positive number, or none when absent or null. */
function softcap(config: ModelConfig, key: string, fallback: number): number | undefined {
  if (config[key] === null) return undefined;
  return positiveNumber(config, key, fallback);
}

/** Gemma's RMSNorm scales by 1 + weight: the 1 is added as the weight is read. */
function plusOne(weight: Tensor): Tensor {
  return {
    dims: weight.dims,
    get data() {
      return Float32Array.from(weight.data, (w) => w + 1);
    },
  };
}

export const gemma2: DecoderArchitecture = {
  kind: 'decoder',
  modelTypes: ['gemma2'],

  spec(config) {
    // transformers reads hidden_activation (hidden_act is the older name).
    oneOf(config, config.hidden_activation === undefined || config.hidden_activation === null ? 'hidden_act' : 'hidden_activation', ['gelu_pytorch_tanh']);
    oneOf(config, 'attention_bias', [false]);
    oneOf(config, 'tie_word_embeddings', [true]);
    const hiddenSize = positiveInt(config, 'hidden_size');
    const numHeads = positiveInt(config, 'num_attention_heads');
    const numKvHeads = positiveInt(config, 'num_key_value_heads', numHeads);
    const numLayers = positiveInt(config, 'num_hidden_layers');
    if (numHeads % numKvHeads !== 0) {
      throw new ChorusError('CHORUS_FILE_INVALID', `config.json: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
    }
    const spec: DecoderSpec = {
      vocabSize: positiveInt(config, 'vocab_size'),
      hiddenSize,
      numLayers,
      numHeads,
      numKvHeads,
      headDim: positiveInt(config, 'head_dim', 256),
      norm: 'rmsnorm',
      normEps: positiveNumber(config, 'rms_norm_eps', 1e-6),
      mlp: 'gelu_tanh_gated',
      positions: { kind: 'rotary', theta: ropeTheta(config) },
      maxPositions: positiveInt(config, 'max_position_embeddings', 8192),
      attnScale: positiveNumber(config, 'query_pre_attn_scalar', 256) ** -0.5,
      embedScale: Math.sqrt(hiddenSize),
      attnSoftcap: softcap(config, 'attn_logit_softcapping', 50),
      finalSoftcap: softcap(config, 'final_logit_softcapping', 30),
    };
    // transformers' Gemma2Config: layer i slides when i is even, unless layer_types says otherwise.
    const window = slidingWindow({ sliding_window: 4096, ...config }, numLayers, (i) => i % 2 === 0);
    return window === undefined ? spec : { ...spec, slidingWindow: window };
  },

  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights {
    const { hiddenSize: d, numHeads, numKvHeads, headDim, vocabSize } = spec;
    const intermediate = positiveInt(checkpoint.config, 'intermediate_size');
    const linear = (name: string, out: number, inDim: number): Linear => ({ weight: transpose2d(checkpoint.take(`${name}.weight`, [out, inDim])) });
    const rms = (name: string): Norm => ({ weight: plusOne(checkpoint.take(`${name}.weight`, [d])) });
    const layers = Array.from({ length: spec.numLayers }, (_, i) => {
      const p = `model.layers.${i}`;
      return {
        inputNorm: rms(`${p}.input_layernorm`),
        q: linear(`${p}.self_attn.q_proj`, numHeads * headDim, d),
        k: linear(`${p}.self_attn.k_proj`, numKvHeads * headDim, d),
        v: linear(`${p}.self_attn.v_proj`, numKvHeads * headDim, d),
        o: linear(`${p}.self_attn.o_proj`, d, numHeads * headDim),
        postAttnNorm: rms(`${p}.post_attention_layernorm`),
        postNorm: rms(`${p}.pre_feedforward_layernorm`),
        gate: linear(`${p}.mlp.gate_proj`, intermediate, d),
        up: linear(`${p}.mlp.up_proj`, intermediate, d),
        down: linear(`${p}.mlp.down_proj`, d, intermediate),
        postMlpNorm: rms(`${p}.post_feedforward_layernorm`),
      };
    });
    const embedTokens = checkpoint.take('model.embed_tokens.weight', [vocabSize, d]);
    if (bool(checkpoint.config, 'tie_word_embeddings', true)) checkpoint.takeTiedCopy('lm_head.weight', embedTokens);
    return { embedTokens, layers, finalNorm: rms('model.norm') };
  },
};
