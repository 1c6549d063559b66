/**
 * BART and mBART: learned positions read at position + 2, a LayerNorm on the embeddings, exact-GELU
 * feed-forward, attention scaled by head_dim^-0.5, the head tied to the embeddings plus
 * final_logits_bias. BART normalises after each residual add; mBART before each sublayer, with a final
 * norm per stack, and scales embeddings by sqrt(d_model).
 */
import { ChorusError } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import { bool, oneOf, positiveInt } from '../config-fields.ts';
import type { Linear, Norm } from '../decoder-spec.ts';
import type { AttentionWeights, Seq2SeqSpec } from '../seq2seq-spec.ts';
import { transpose2d } from '../tensor.ts';
import type { Seq2SeqArchitecture } from './architecture.ts';

const POSITION_OFFSET = 2;

export const bart: Seq2SeqArchitecture = {
  kind: 'seq2seq',
  modelTypes: ['bart', 'mbart'],

  spec(config) {
    oneOf(config, 'activation_function', ['gelu']);
    const dModel = positiveInt(config, 'd_model');
    const heads = positiveInt(config, 'encoder_attention_heads');
    for (const [a, b] of [['encoder_attention_heads', 'decoder_attention_heads'], ['encoder_ffn_dim', 'decoder_ffn_dim']] as const) {
      if (config[a] !== config[b]) throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: ${a} and ${b} differ (${String(config[a])}, ${String(config[b])}); they must be equal`, { param: b });
    }
    const mbart = config.model_type === 'mbart';
    return {
      vocabSize: positiveInt(config, 'vocab_size'),
      dModel,
      numHeads: heads,
      headDim: dModel / heads,
      encoderLayers: positiveInt(config, 'encoder_layers'),
      decoderLayers: positiveInt(config, 'decoder_layers'),
      norm: 'layernorm',
      normEps: 1e-5,
      preNorm: mbart,
      ffn: 'gelu',
      positions: { kind: 'learned', offset: POSITION_OFFSET },
      attentionScale: (dModel / heads) ** -0.5,
      embedScale: bool(config, 'scale_embedding', false) ? Math.sqrt(dModel) : 1,
      embeddingNorm: true,
      finalNorm: mbart,
      headScale: 1,
    };
  },

  weights(checkpoint: Checkpoint, spec: Seq2SeqSpec, { encoderOnly }) {
    const d = spec.dModel;
    const ffn = positiveInt(checkpoint.config, 'encoder_ffn_dim');
    const maxPositions = positiveInt(checkpoint.config, 'max_position_embeddings');
    const linear = (name: string, out: number, inDim: number): Linear => ({
      weight: transpose2d(checkpoint.take(`${name}.weight`, [out, inDim])),
      bias: checkpoint.take(`${name}.bias`, [out]),
    });
    const layerNorm = (name: string): Norm => ({ weight: checkpoint.take(`${name}.weight`, [d]), bias: checkpoint.take(`${name}.bias`, [d]) });
    const attention = (p: string): AttentionWeights => ({ q: linear(`${p}.q_proj`, d, d), k: linear(`${p}.k_proj`, d, d), v: linear(`${p}.v_proj`, d, d), o: linear(`${p}.out_proj`, d, d) });
    const feedForward = (p: string) => ({ up: linear(`${p}.fc1`, ffn, d), down: linear(`${p}.fc2`, d, ffn) });
    const stack = (name: 'encoder' | 'decoder') => ({
      positions: checkpoint.take(`model.${name}.embed_positions.weight`, [maxPositions + POSITION_OFFSET, d]),
      embeddingNorm: layerNorm(`model.${name}.layernorm_embedding`),
      finalNorm: spec.finalNorm ? layerNorm(`model.${name}.layer_norm`) : undefined,
    });

    const shared = checkpoint.take('model.shared.weight', [spec.vocabSize, d]);
    checkpoint.takeTiedCopy('model.encoder.embed_tokens.weight', shared);
    const encoder = {
      ...stack('encoder'),
      layers: Array.from({ length: spec.encoderLayers }, (_, i) => {
        const p = `model.encoder.layers.${i}`;
        return { selfNorm: layerNorm(`${p}.self_attn_layer_norm`), self: attention(`${p}.self_attn`), ffnNorm: layerNorm(`${p}.final_layer_norm`), ffn: feedForward(p) };
      }),
    };
    if (encoderOnly) {
      for (const name of checkpoint.names()) if (name.startsWith('model.decoder.') || name === 'lm_head.weight' || name === 'final_logits_bias') checkpoint.skip(name);
      return { shared, encoder, decoder: { layers: [] } };
    }
    checkpoint.takeTiedCopy('model.decoder.embed_tokens.weight', shared);
    const decoder = {
      ...stack('decoder'),
      layers: Array.from({ length: spec.decoderLayers }, (_, i) => {
        const p = `model.decoder.layers.${i}`;
        return {
          selfNorm: layerNorm(`${p}.self_attn_layer_norm`),
          self: attention(`${p}.self_attn`),
          crossNorm: layerNorm(`${p}.encoder_attn_layer_norm`),
          cross: attention(`${p}.encoder_attn`),
          ffnNorm: layerNorm(`${p}.final_layer_norm`),
          ffn: feedForward(p),
        };
      }),
    };
    checkpoint.takeTiedCopy('lm_head.weight', shared);
    const logitsBias = checkpoint.has('final_logits_bias') ? checkpoint.take('final_logits_bias', [1, spec.vocabSize]) : undefined;
    return { shared, encoder, decoder, logitsBias };
  },
};
