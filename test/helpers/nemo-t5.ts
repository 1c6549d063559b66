/**
 * A NeMo Megatron T5 written from a Hugging Face T5 checkpoint the tests made: its tensors renamed and
 * fused as NeMo's hf_t5-v1_1_to_nemo converter and MegatronT5Model lay them out (query_key_value in
 * [heads, 3, head_dim] rows, key_value in [heads, 2, head_dim]; with megatron_legacy [3, heads, head_dim]
 * and [2, heads, head_dim]), pickled by torch's format through the tests' pickle writer, beside a
 * model_config.yaml, as a .nemo tar or the directory it unpacks to.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readHfCheckpoint } from '../../src/modelbuild/checkpoint.ts';
import { tensorPy, torchSave, type Py } from './pickle-writer.ts';

/** How the NeMo model is laid out. */
export interface NemoT5Options {
  megatronLegacy: boolean;
  /** Names as megatron_amp_O2's wrapper saves them (`enc_dec_model.module.`). Default: false. */
  ampO2?: boolean;
}

/** Writes the unpacked .nemo of the T5 in `hf` to `dir`: model_config.yaml and model_weights.ckpt. */
export function writeNemoT5Dir(hf: string, dir: string, options: NemoT5Options): void {
  const checkpoint = readHfCheckpoint(hf);
  const c = checkpoint.config as Record<string, number | string | boolean>;
  const d = Number(c.d_model);
  const heads = Number(c.num_heads);
  const headDim = Number(c.d_kv);
  const inner = heads * headDim;
  const gated = c.feed_forward_proj !== 'relu';
  const sd = new Map<Py, Py>();
  const storages = new Map<string, Uint8Array>();
  const put = (name: string, dims: number[], values: Float32Array): void => {
    const key = String(storages.size);
    storages.set(key, new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
    sd.set(options.ampO2 ? name.replace(/^enc_dec_model\./, 'enc_dec_model.module.') : name, tensorPy(key, 'FloatStorage', values.length, 0, dims, dims.length === 2 ? [dims[1]!, 1] : [1]));
  };
  const hfTensor = (name: string): Float32Array => Float32Array.from(checkpoint.peek(name).data);
  /** [q; k; v] (or [k; v]) fused in NeMo's row order. */
  const fuse = (names: string[]): Float32Array => {
    const parts = names.map(hfTensor);
    const out = new Float32Array(parts.length * inner * d);
    parts.forEach((w, which) => {
      for (let head = 0; head < heads; head++) {
        for (let i = 0; i < headDim; i++) {
          const row = options.megatronLegacy ? which * inner + head * headDim + i : (head * parts.length + which) * headDim + i;
          out.set(w.subarray((head * headDim + i) * d, (head * headDim + i + 1) * d), row * d);
        }
      }
    });
    return out;
  };
  const vocab = Number(c.vocab_size);
  const ff = Number(c.d_ff);
  put('enc_dec_model.encoder_embedding.word_embeddings.weight', [vocab, d], hfTensor('shared.weight'));
  put('enc_dec_model.decoder_embedding.word_embeddings.weight', [vocab, d], hfTensor('shared.weight'));
  put('enc_dec_model.tokens_head.weight', [vocab, d], hfTensor('lm_head.weight'));
  for (const stack of ['encoder', 'decoder'] as const) {
    const layers = Number(stack === 'encoder' ? c.num_layers : c.num_decoder_layers);
    put(`enc_dec_model.${stack}_relative_position_embedding.relative_position_embedding.weight`, [32, heads], hfTensor(`${stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight`));
    for (let i = 0; i < layers; i++) {
      const h = `${stack}.block.${i}.layer.`;
      const m = `enc_dec_model.enc_dec_model.${stack}.model.layers.${i}.`;
      put(`${m}input_layernorm.weight`, [d], hfTensor(`${h}0.layer_norm.weight`));
      put(`${m}self_attention.query_key_value.weight`, [3 * inner, d], fuse(['q', 'k', 'v'].map((x) => `${h}0.SelfAttention.${x}.weight`)));
      put(`${m}self_attention.dense.weight`, [d, inner], hfTensor(`${h}0.SelfAttention.o.weight`));
      put(`${m}post_attention_layernorm.weight`, [d], hfTensor(`${h}1.layer_norm.weight`));
      let ffn = `${h}1.DenseReluDense`;
      if (stack === 'decoder') {
        put(`${m}inter_attention.query.weight`, [inner, d], hfTensor(`${h}1.EncDecAttention.q.weight`));
        put(`${m}inter_attention.key_value.weight`, [2 * inner, d], fuse(['k', 'v'].map((x) => `${h}1.EncDecAttention.${x}.weight`)));
        put(`${m}inter_attention.dense.weight`, [d, inner], hfTensor(`${h}1.EncDecAttention.o.weight`));
        put(`${m}post_inter_attention_layernorm.weight`, [d], hfTensor(`${h}2.layer_norm.weight`));
        ffn = `${h}2.DenseReluDense`;
      }
      if (gated) {
        put(`${m}mlp.dense_h_to_4h.weight`, [ff, d], hfTensor(`${ffn}.wi_0.weight`));
        put(`${m}mlp.dense_h_to_4h_2.weight`, [ff, d], hfTensor(`${ffn}.wi_1.weight`));
      } else {
        put(`${m}mlp.dense_h_to_4h.weight`, [ff, d], hfTensor(`${ffn}.wi.weight`));
      }
      put(`${m}mlp.dense_4h_to_h.weight`, [d, ff], hfTensor(`${ffn}.wo.weight`));
    }
    put(`enc_dec_model.enc_dec_model.${stack}.model.final_layernorm.weight`, [d], hfTensor(`${stack}.final_layer_norm.weight`));
  }
  mkdirSync(dir, { recursive: true });
  torchSave(join(dir, 'model_weights.ckpt'), sd, storages);
  const activation = { 'gated-gelu': 'geglu', 'gated-silu': 'swiglu', relu: 'relu' }[String(c.feed_forward_proj)];
  const stackYaml = (layers: unknown): string =>
    [
      `  num_layers: ${String(layers)}`,
      `  hidden_size: ${d}`,
      `  ffn_hidden_size: ${ff}`,
      `  num_attention_heads: ${heads}`,
      `  kv_channels: ${headDim}`,
      '  position_embedding_type: relative',
      '  relative_attention_num_buckets: 32',
      '  relative_attention_max_distance: 128',
      '  relative_position_bias_self_attention_only: true',
      `  layernorm_epsilon: ${String(c.layer_norm_epsilon)}`,
      '  bias: false',
      '  normalization: rmsnorm',
      '  arch: transformer',
      `  activation: ${activation}`,
      '  headscale: false',
      '  transformer_block_type: pre_ln',
      '  openai_gelu: true',
      `  megatron_legacy: ${options.megatronLegacy}`,
      '  normalize_attention_scores: false',
    ].join('\n');
  const yaml = [
    `encoder:\n${stackYaml(c.num_layers)}`,
    `decoder:\n${stackYaml(c.num_decoder_layers)}`,
    'tensor_model_parallel_size: 1',
    'pipeline_model_parallel_size: 1',
    'share_token_embeddings: true',
    'share_decoder_tokens_head_embeddings: false',
    'tokens_head_bias: false',
    `megatron_amp_O2: ${options.ampO2 === true}`,
    'target: nemo.collections.nlp.models.language_modeling.megatron_t5_model.MegatronT5Model',
  ].join('\n');
  writeFileSync(join(dir, 'model_config.yaml'), `${yaml}\n`);
}

/** `dir`'s model_config.yaml and model_weights.ckpt as a plain tar, the .nemo file `file`. */
export function tarNemo(dir: string, file: string): void {
  const blocks: Buffer[] = [];
  for (const name of ['model_config.yaml', 'model_weights.ckpt']) {
    const data = readFileSync(join(dir, name));
    const header = Buffer.alloc(512);
    header.write(`./${name}`, 0, 'utf8');
    header.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124, 'ascii');
    header.write('0', 156, 'ascii');
    header.write('ustar\0' + '00', 257, 'ascii');
    blocks.push(header, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  writeFileSync(file, Buffer.concat(blocks));
}
