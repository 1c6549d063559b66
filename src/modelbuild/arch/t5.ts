/**
 * The T5 family: T5 v1.0 (ReLU feed-forward, head tied to the embeddings with a d_model^-0.5 rescale),
 * and T5 v1.1 / flan-T5 / mT5 (gated-GELU feed-forward, untied head) and UL2 (gated-SiLU). RMS norms without bias,
 * unscaled attention, relative position buckets computed once per stack from its first layer's table.
 */
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import { bool, positiveInt, positiveNumber } from '../config-fields.ts';
import type { Linear } from '../decoder-spec.ts';
import type { AttentionWeights, FeedForwardWeights, Seq2SeqSpec } from '../seq2seq-spec.ts';
import { transpose2d } from '../tensor.ts';
import type { Seq2SeqArchitecture } from './architecture.ts';

export const t5: Seq2SeqArchitecture = {
  kind: 'seq2seq',
  modelTypes: ['t5', 'mt5', 'umt5'],

  spec(config) {
    const proj = config.feed_forward_proj ?? 'relu';
    const ffn = ({ relu: 'relu', 'gated-gelu': 'gated_gelu_new', 'gated-silu': 'gated_silu' } as const)[String(proj) as 'relu'];
    if (ffn === undefined) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: feed_forward_proj ${describe(proj)} is not supported; expected "relu", "gated-gelu" or "gated-silu"`, {
        param: 'feed_forward_proj',
      });
    }
    if (config.model_type === 'umt5') throw new ChorusError('CHORUS_UNSUPPORTED', 'config.json: umt5 (a relative bias per layer) is not supported yet', { param: 'model_type' });
    const dModel = positiveInt(config, 'd_model');
    const layers = positiveInt(config, 'num_layers');
    const tied = bool(config, 'tie_word_embeddings', true);
    return {
      vocabSize: positiveInt(config, 'vocab_size'),
      dModel,
      numHeads: positiveInt(config, 'num_heads'),
      headDim: positiveInt(config, 'd_kv'),
      encoderLayers: layers,
      decoderLayers: positiveInt(config, 'num_decoder_layers', layers),
      norm: 'rmsnorm',
      normEps: positiveNumber(config, 'layer_norm_epsilon', 1e-6),
      preNorm: true,
      ffn,
      positions: {
        kind: 'relative',
        numBuckets: positiveInt(config, 'relative_attention_num_buckets', 32),
        maxDistance: positiveInt(config, 'relative_attention_max_distance', 128),
      },
      attentionScale: 1,
      embedScale: 1,
      embeddingNorm: false,
      finalNorm: true,
      headScale: tied ? dModel ** -0.5 : 1,
    };
  },

  weights(checkpoint: Checkpoint, spec: Seq2SeqSpec, { encoderOnly }) {
    const d = spec.dModel;
    const inner = spec.numHeads * spec.headDim;
    const ff = positiveInt(checkpoint.config, 'd_ff');
    const linear = (name: string, out: number, inDim: number): Linear => ({ weight: transpose2d(checkpoint.take(`${name}.weight`, [out, inDim])) });
    const rms = (name: string) => ({ weight: checkpoint.take(`${name}.weight`, [d]) });
    const attention = (p: string): AttentionWeights => ({ q: linear(`${p}.q`, inner, d), k: linear(`${p}.k`, inner, d), v: linear(`${p}.v`, inner, d), o: linear(`${p}.o`, d, inner) });
    const feedForward = (p: string): FeedForwardWeights =>
      spec.ffn === 'relu'
        ? { up: linear(`${p}.wi`, ff, d), down: linear(`${p}.wo`, d, ff) }
        : { gate: linear(`${p}.wi_0`, ff, d), up: linear(`${p}.wi_1`, ff, d), down: linear(`${p}.wo`, d, ff) };
    const bucketTable = (stack: string) => checkpoint.take(`${stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight`, [spec.positions.kind === 'relative' ? spec.positions.numBuckets : 0, spec.numHeads]);

    const shared = checkpoint.take('shared.weight', [spec.vocabSize, d]);
    checkpoint.takeTiedCopy('encoder.embed_tokens.weight', shared);
    const encoder = {
      relativeBias: bucketTable('encoder'),
      layers: Array.from({ length: spec.encoderLayers }, (_, i) => {
        const p = `encoder.block.${i}.layer`;
        return { selfNorm: rms(`${p}.0.layer_norm`), self: attention(`${p}.0.SelfAttention`), ffnNorm: rms(`${p}.1.layer_norm`), ffn: feedForward(`${p}.1.DenseReluDense`) };
      }),
      finalNorm: rms('encoder.final_layer_norm'),
    };
    if (encoderOnly) {
      for (const name of checkpoint.names()) if (name.startsWith('decoder.') || name === 'lm_head.weight') checkpoint.skip(name);
      return { shared, encoder, decoder: { layers: [] } };
    }
    checkpoint.takeTiedCopy('decoder.embed_tokens.weight', shared);
    const decoder = {
      relativeBias: bucketTable('decoder'),
      layers: Array.from({ length: spec.decoderLayers }, (_, i) => {
        const p = `decoder.block.${i}.layer`;
        return {
          selfNorm: rms(`${p}.0.layer_norm`),
          self: attention(`${p}.0.SelfAttention`),
          crossNorm: rms(`${p}.1.layer_norm`),
          cross: attention(`${p}.1.EncDecAttention`),
          ffnNorm: rms(`${p}.2.layer_norm`),
          ffn: feedForward(`${p}.2.DenseReluDense`),
        };
      }),
      finalNorm: rms('decoder.final_layer_norm'),
    };
    const tied = bool(checkpoint.config, 'tie_word_embeddings', true);
    if (tied) checkpoint.takeTiedCopy('lm_head.weight', shared);
    return { shared, encoder, decoder, lmHead: tied ? undefined : checkpoint.take('lm_head.weight', [spec.vocabSize, d]) };
  },
};
