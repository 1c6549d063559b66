/**
 * GPT-2: learned positions, pre-LayerNorm blocks, gelu_new MLP, tied head. Its Conv1D weights are
 * already [in, out]; the fused c_attn [hidden, 3 * hidden] is split into q, k and v.
 */
import { ChorusError } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import { oneOf, positiveInt, positiveNumber } from '../config-fields.ts';
import type { DecoderSpec, DecoderWeights, Linear } from '../decoder-spec.ts';
import { columns } from '../tensor-slice.ts';
import type { DecoderArchitecture } from './architecture.ts';

export const gpt2: DecoderArchitecture = {
  kind: 'decoder',
  modelTypes: ['gpt2'],

  spec(config) {
    oneOf(config, 'activation_function', ['gelu_new']);
    oneOf(config, 'scale_attn_weights', [true]);
    oneOf(config, 'tie_word_embeddings', [true]);
    const hiddenSize = positiveInt(config, 'n_embd');
    const numHeads = positiveInt(config, 'n_head');
    if (hiddenSize % numHeads !== 0) throw new ChorusError('CHORUS_FILE_INVALID', `config.json: n_embd ${hiddenSize} is not a multiple of n_head ${numHeads}`);
    return {
      vocabSize: positiveInt(config, 'vocab_size'),
      hiddenSize,
      numLayers: positiveInt(config, 'n_layer'),
      numHeads,
      numKvHeads: numHeads,
      headDim: hiddenSize / numHeads,
      norm: 'layernorm',
      normEps: positiveNumber(config, 'layer_norm_epsilon', 1e-5),
      mlp: 'gelu_new',
      positions: { kind: 'learned' },
      maxPositions: positiveInt(config, 'n_positions', 1024),
    };
  },

  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights {
    const d = spec.hiddenSize;
    const inner = positiveInt(checkpoint.config, 'n_inner', 4 * d);
    // Checkpoints saved from GPT2LMHeadModel prefix names with "transformer."; GPT2Model's do not.
    const prefix = checkpoint.has('transformer.wte.weight') ? 'transformer.' : '';
    const conv = (name: string, inDim: number, out: number): Linear => ({
      weight: checkpoint.take(`${prefix}${name}.weight`, [inDim, out]),
      bias: checkpoint.take(`${prefix}${name}.bias`, [out]),
    });
    const layerNorm = (name: string) => ({ weight: checkpoint.take(`${prefix}${name}.weight`, [d]), bias: checkpoint.take(`${prefix}${name}.bias`, [d]) });
    const layers = Array.from({ length: spec.numLayers }, (_, i) => {
      const p = `h.${i}`;
      const [q, k, v] = splitColumns(conv(`${p}.attn.c_attn`, d, 3 * d), 3);
      return {
        inputNorm: layerNorm(`${p}.ln_1`),
        q: q!,
        k: k!,
        v: v!,
        o: conv(`${p}.attn.c_proj`, d, d),
        postNorm: layerNorm(`${p}.ln_2`),
        up: conv(`${p}.mlp.c_fc`, d, inner),
        down: conv(`${p}.mlp.c_proj`, inner, d),
      };
    });
    const embedTokens = checkpoint.take(`${prefix}wte.weight`, [spec.vocabSize, d]);
    // transformers keeps the attention's causal-mask buffer ("attn.bias") in older checkpoints; it is not a weight.
    for (let i = 0; i < spec.numLayers; i++) {
      for (const buffer of [`${prefix}h.${i}.attn.bias`, `${prefix}h.${i}.attn.masked_bias`]) if (checkpoint.has(buffer)) checkpoint.skip(buffer);
    }
    checkpoint.takeTiedCopy('lm_head.weight', embedTokens);
    return {
      embedTokens,
      embedPositions: checkpoint.take(`${prefix}wpe.weight`, [spec.maxPositions, d]),
      layers,
      finalNorm: layerNorm('ln_f'),
    };
  },
};

/** Splits a linear layer's output columns into `parts` equal layers (lazy: each part is read when it is written). */
function splitColumns(layer: Linear, parts: number): Linear[] {
  const width = layer.weight.dims[1]! / parts;
  return Array.from({ length: parts }, (_, part) => {
    const span = { start: part * width, count: width };
    return { weight: columns(layer.weight, span), bias: layer.bias === undefined ? undefined : columns(layer.bias, span) };
  });
}
