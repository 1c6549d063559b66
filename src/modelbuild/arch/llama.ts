/**
 * The Llama family: Llama 2 and 3.x (Llama 3's rotary scaling), Qwen2 (q/k/v biases), Qwen3 (per-head
 * q/k RMSNorm), SmolLM, and llama2.c checkpoints. RMSNorm, rotary embeddings over the whole head,
 * SwiGLU, grouped-query attention, tied or untied head.
 */
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import { bool, oneOf, positiveInt, positiveNumber } from '../config-fields.ts';
import type { DecoderSpec, DecoderWeights, Linear } from '../decoder-spec.ts';
import { transpose2d } from '../tensor.ts';
import type { DecoderArchitecture } from './architecture.ts';
import type { ModelConfig } from '../checkpoint.ts';
import { rotaryPositions, wholeHeadRotary } from './rope.ts';

/** The shape of a Llama-style decoder (shared with Phi-3). */
export function llamaSpec(config: ModelConfig): DecoderSpec {
  oneOf(config, 'hidden_act', ['silu']);
  wholeHeadRotary(config);
  const hiddenSize = positiveInt(config, 'hidden_size');
  const numHeads = positiveInt(config, 'num_attention_heads');
  const numKvHeads = positiveInt(config, 'num_key_value_heads', numHeads);
  const headDim = positiveInt(config, 'head_dim', hiddenSize / numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new ChorusError('CHORUS_FILE_INVALID', `config.json: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  }
  return {
    vocabSize: positiveInt(config, 'vocab_size'),
    hiddenSize,
    numLayers: positiveInt(config, 'num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    norm: 'rmsnorm',
    normEps: positiveNumber(config, 'rms_norm_eps', 1e-6),
    mlp: 'silu_gated',
    positions: rotaryPositions(config),
    maxPositions: positiveInt(config, 'max_position_embeddings', 2048),
  };
}

/**
 * Qwen2's and Qwen3's sliding window, as transformers reads it: only with `use_sliding_window`, over
 * `sliding_window` positions, in the layers `layer_types` names `sliding_attention` or, without it, the
 * layers from `max_window_layers` on.
 */
function qwenWindow(config: ModelConfig, numLayers: number): DecoderSpec['slidingWindow'] {
  if (!bool(config, 'use_sliding_window', false)) return undefined;
  const size = positiveInt(config, 'sliding_window');
  const types = config.layer_types;
  if (types !== undefined && types !== null) {
    if (!Array.isArray(types) || types.length !== numLayers || types.some((t) => t !== 'sliding_attention' && t !== 'full_attention')) {
      throw new ChorusError('CHORUS_FILE_INVALID', `config.json: layer_types must list sliding_attention or full_attention for each of the ${numLayers} layers, got ${describe(types)}`, { param: 'layer_types' });
    }
    return { size, layers: types.map((t) => t === 'sliding_attention') };
  }
  const first = config.max_window_layers ?? numLayers;
  if (typeof first !== 'number' || !Number.isInteger(first) || first < 0) {
    throw new ChorusError('CHORUS_FILE_INVALID', `config.json: max_window_layers must be a non-negative integer, got ${describe(first)}`, { param: 'max_window_layers', value: first });
  }
  return { size, layers: Array.from({ length: numLayers }, (_, i) => i >= first) };
}

/**
 * A Llama-layout decoder's weights around its `layers`: `model.embed_tokens`, `model.norm`, and
 * `lm_head` unless `tie_word_embeddings` ties it to the embeddings.
 */
export function withLlamaEnds(checkpoint: Checkpoint, spec: DecoderSpec, layers: DecoderWeights['layers']): DecoderWeights {
  const { vocabSize, hiddenSize: d } = spec;
  const embedTokens = checkpoint.take('model.embed_tokens.weight', [vocabSize, d]);
  const tied = bool(checkpoint.config, 'tie_word_embeddings', false);
  if (tied) checkpoint.takeTiedCopy('lm_head.weight', embedTokens);
  return {
    embedTokens,
    layers,
    finalNorm: { weight: checkpoint.take('model.norm.weight', [d]) },
    lmHead: tied ? undefined : checkpoint.take('lm_head.weight', [vocabSize, d]),
  };
}

export const llama: DecoderArchitecture = {
  kind: 'decoder',
  modelTypes: ['llama', 'qwen2', 'qwen3'],

  spec(config) {
    const spec = llamaSpec(config);
    const window = config.model_type === 'llama' ? undefined : qwenWindow(config, spec.numLayers);
    return { ...spec, ...(config.model_type === 'qwen3' ? { qkNorm: true } : {}), ...(window === undefined ? {} : { slidingWindow: window }) };
  },

  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights {
    const { hiddenSize: d, numHeads, numKvHeads, headDim } = spec;
    const intermediate = positiveInt(checkpoint.config, 'intermediate_size');
    const qkvBias = checkpoint.config.model_type === 'qwen2' || checkpoint.config.attention_bias === true;
    /** A [out, in] PyTorch Linear turned into MatMul layout, with its bias when the model has one. */
    const linear = (name: string, out: number, inDim: number, bias = false): Linear => ({
      weight: transpose2d(checkpoint.take(`${name}.weight`, [out, inDim])),
      bias: bias ? checkpoint.take(`${name}.bias`, [out]) : undefined,
    });
    const layers = Array.from({ length: spec.numLayers }, (_, i) => {
      const p = `model.layers.${i}`;
      return {
        inputNorm: { weight: checkpoint.take(`${p}.input_layernorm.weight`, [d]) },
        q: linear(`${p}.self_attn.q_proj`, numHeads * headDim, d, qkvBias),
        k: linear(`${p}.self_attn.k_proj`, numKvHeads * headDim, d, qkvBias),
        v: linear(`${p}.self_attn.v_proj`, numKvHeads * headDim, d, qkvBias),
        o: linear(`${p}.self_attn.o_proj`, d, numHeads * headDim),
        ...(spec.qkNorm === true ? { qNorm: { weight: checkpoint.take(`${p}.self_attn.q_norm.weight`, [headDim]) }, kNorm: { weight: checkpoint.take(`${p}.self_attn.k_norm.weight`, [headDim]) } } : {}),
        postNorm: { weight: checkpoint.take(`${p}.post_attention_layernorm.weight`, [d]) },
        gate: linear(`${p}.mlp.gate_proj`, intermediate, d),
        up: linear(`${p}.mlp.up_proj`, intermediate, d),
        down: linear(`${p}.mlp.down_proj`, d, intermediate),
      };
    });
    return withLlamaEnds(checkpoint, spec, layers);
  },
};

