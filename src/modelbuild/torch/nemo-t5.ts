/**
 * NeMo Megatron T5 and UL2 models (MegatronT5Model) as a Hugging Face T5 checkpoint. The state dict, as
 * NeMo names it (and its hf_t5-v1_1_to_nemo converter maps T5 v1.1, mT5, UL2 and T0 onto):
 * - `enc_dec_model.{encoder,decoder}_embedding.word_embeddings.weight` (one table when
 *   share_token_embeddings), `enc_dec_model.tokens_head.weight` (an untied head) and
 *   `enc_dec_model.{encoder,decoder}_relative_position_embedding.relative_position_embedding.weight`
 *   ([buckets, heads], T5's relative_attention_bias);
 * - per layer of `enc_dec_model.enc_dec_model.{encoder,decoder}.model.layers.N`: input_layernorm,
 *   self_attention.query_key_value ([heads, 3, head_dim] rows; [3, heads, head_dim] with
 *   megatron_legacy) and self_attention.dense, post_attention_layernorm; the decoder's
 *   inter_attention.query, inter_attention.key_value ([heads, 2, head_dim]; [2, heads, head_dim] with
 *   megatron_legacy) and inter_attention.dense, then post_inter_attention_layernorm before its MLP;
 *   mlp.dense_h_to_4h (the activated half), mlp.dense_h_to_4h_2 (the gated models' other half),
 *   mlp.dense_4h_to_h; `final_layernorm` per stack.
 * The T5 that maps: RMS norms without biases, pre-norm blocks, unscaled attention scores, relative
 * positions on self-attention only, GeGLU (OpenAI's tanh GELU), SwiGLU (UL2) or ReLU, no bias on the
 * head. A head tied to the embeddings is not rescaled by NeMo (T5 v1.0's d_model^-0.5), so it is built
 * as an untied head holding the embeddings. Anything else is refused naming the field.
 */
import { ChorusError, describe } from '../../errors.ts';
import { Checkpoint, type ModelConfig } from '../checkpoint.ts';
import { elementCount, shapeText, type Tensor } from '../tensor.ts';

const FEED_FORWARD: Record<string, string> = { geglu: 'gated-gelu', swiglu: 'gated-silu', relu: 'relu' };

/** The fields of one stack, from its `encoder:` / `decoder:` section, else the top level (older NeMo). */
function stackConfig(config: Record<string, unknown>, stack: 'encoder' | 'decoder'): (key: string) => unknown {
  const section = config[stack];
  const own = section !== null && typeof section === 'object' ? (section as Record<string, unknown>) : {};
  return (key) => own[key] ?? config[key];
}

/** Reads a MegatronT5Model (its config `config`, its state dict from `readWeights` once the config is checked) as a T5 checkpoint. */
export function nemoT5Checkpoint(source: string, config: Record<string, unknown>, readWeights: () => Map<string, Tensor>): Checkpoint {
  const refuse = (key: string, value: unknown, what: string): never => {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: model_config.yaml ${key} ${describe(value)} is not supported; the NeMo T5 read here has ${what}`, { param: key, value });
  };
  const expect = (key: string, value: unknown, allowed: readonly unknown[], what: string): void => {
    if (value !== undefined && value !== null && !allowed.includes(value)) refuse(key, value, what);
  };
  expect('tensor_model_parallel_size', config.tensor_model_parallel_size, [1], 'one tensor-parallel rank');
  expect('pipeline_model_parallel_size', config.pipeline_model_parallel_size, [1], 'no pipeline-parallel split');
  expect('share_token_embeddings', config.share_token_embeddings, [true], 'one embedding table for encoder and decoder');
  expect('tokens_head_bias', config.tokens_head_bias ?? true, [false], 'no bias on the head (T5 has none)');
  const shapes = (['encoder', 'decoder'] as const).map((stack) => {
    const get = stackConfig(config, stack);
    const check = (key: string, allowed: readonly unknown[], what: string, fallback?: unknown): void => expect(`${stack}.${key}`, get(key) ?? fallback, allowed, what);
    check('arch', ['transformer'], 'transformer stacks');
    check('position_embedding_type', ['relative'], "T5's relative position buckets", 'learned_absolute');
    check('relative_position_bias_self_attention_only', [true], 'relative positions on self-attention only', true);
    check('normalization', ['rmsnorm'], "T5's RMS norm", 'layernorm');
    check('bias', [false], 'no biases', true);
    check('transformer_block_type', ['pre_ln'], 'pre-norm blocks', 'pre_ln');
    check('normalize_attention_scores', [false], "T5's unscaled attention scores", true);
    check('headscale', [false], 'no head scaling', false);
    check('num_self_attention_per_cross_attention', [1], 'one self-attention per cross-attention', 1);
    const activation = get('activation') ?? 'gelu';
    if (FEED_FORWARD[String(activation)] === undefined) refuse(`${stack}.activation`, activation, 'geglu (T5 v1.1, mT5), swiglu (UL2) or relu');
    if (activation === 'geglu') check('openai_gelu', [true], "GeGLU over OpenAI's tanh GELU (T5's gelu_new)", false);
    const int = (key: string, fallback?: number): number => {
      const value = get(key) ?? fallback;
      if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: model_config.yaml ${stack}.${key} must be a positive integer, got ${describe(value)}`, { param: `${stack}.${key}` });
      return value;
    };
    const hidden = int('hidden_size');
    const heads = int('num_attention_heads');
    const eps = get('layernorm_epsilon');
    return {
      layers: int('num_layers'),
      hidden,
      heads,
      headDim: int('kv_channels', hidden / heads),
      ffn: int('ffn_hidden_size', 4 * hidden),
      activation: String(activation),
      buckets: int('relative_attention_num_buckets', 32),
      maxDistance: int('relative_attention_max_distance', 128),
      eps: typeof eps === 'number' ? eps : 1e-5,
      legacy: get('megatron_legacy') === true,
    };
  });
  const [enc, dec] = shapes as [(typeof shapes)[0], (typeof shapes)[0]];
  for (const key of ['hidden', 'heads', 'headDim', 'ffn', 'activation', 'buckets', 'maxDistance', 'eps', 'legacy'] as const) {
    if (enc[key] !== dec[key]) refuse(`decoder.${key}`, dec[key], `the encoder's ${key} (${describe(enc[key])}) in the decoder too`);
  }

  const sd = readWeights();
  // megatron_amp_O2 wraps the module once more.
  const prefix = [...sd.keys()].some((k) => k.startsWith('enc_dec_model.module.')) ? 'enc_dec_model.module.' : 'enc_dec_model.';
  const used = new Set<string>();
  const get = (name: string, dims: readonly number[]): Tensor => {
    const tensor = sd.get(prefix + name);
    if (tensor === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: tensor ${prefix}${name} is missing (expected shape ${shapeText(dims)})`, { param: prefix + name });
    if (tensor.dims.length !== dims.length || tensor.dims.some((n, i) => n !== dims[i])) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${source}: tensor ${prefix}${name} has shape ${shapeText(tensor.dims)}, expected ${shapeText(dims)}`, { param: prefix + name });
    }
    used.add(prefix + name);
    return tensor;
  };
  const { hidden: d, heads, headDim, ffn } = enc;
  const inner = heads * headDim;
  const tensors = new Map<string, Tensor>();
  /** `rows` rows of `from` ([n, d]), row r of the result being row rowOf(r) of the source. */
  const rowsOf = (from: Tensor, rows: number, rowOf: (r: number) => number): Tensor => {
    const width = from.dims[1] ?? 0;
    return {
      dims: [rows, width],
      ...(from.dtype === undefined ? {} : { dtype: from.dtype }),
      get data() {
        const source = from.data;
        const out = new Float32Array(rows * width);
        for (let r = 0; r < rows; r++) out.set(source.subarray(rowOf(r) * width, (rowOf(r) + 1) * width), r * width);
        return out;
      },
    };
  };
  /** Part `which` of `parts` of a fused projection, its rows as NeMo lays them out. */
  const split = (fused: Tensor, parts: number, which: number): Tensor =>
    rowsOf(fused, inner, (r) => {
      const head = Math.floor(r / headDim);
      const i = r % headDim;
      return enc.legacy ? which * inner + head * headDim + i : (head * parts + which) * headDim + i;
    });

  const vocab = sd.get(`${prefix}decoder_embedding.word_embeddings.weight`)?.dims[0] ?? sd.get(`${prefix}encoder_embedding.word_embeddings.weight`)?.dims[0] ?? 0;
  const embeddings = get(sd.has(`${prefix}decoder_embedding.word_embeddings.weight`) ? 'decoder_embedding.word_embeddings.weight' : 'encoder_embedding.word_embeddings.weight', [vocab, d]);
  tensors.set('shared.weight', embeddings);
  if (sd.has(`${prefix}encoder_embedding.word_embeddings.weight`)) tensors.set('encoder.embed_tokens.weight', get('encoder_embedding.word_embeddings.weight', [vocab, d]));
  const tiedHead = config.share_decoder_tokens_head_embeddings !== false;
  tensors.set('lm_head.weight', tiedHead ? embeddings : get('tokens_head.weight', [vocab, d]));
  for (const stack of ['encoder', 'decoder'] as const) {
    const shape = stack === 'encoder' ? enc : dec;
    tensors.set(`${stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight`, get(`${stack}_relative_position_embedding.relative_position_embedding.weight`, [shape.buckets, heads]));
    for (let i = 0; i < shape.layers; i++) {
      const m = `enc_dec_model.${stack}.model.layers.${i}.`;
      const h = `${stack}.block.${i}.layer.`;
      const qkv = get(`${m}self_attention.query_key_value.weight`, [3 * inner, d]);
      ['q', 'k', 'v'].forEach((x, which) => tensors.set(`${h}0.SelfAttention.${x}.weight`, split(qkv, 3, which)));
      tensors.set(`${h}0.SelfAttention.o.weight`, get(`${m}self_attention.dense.weight`, [d, inner]));
      tensors.set(`${h}0.layer_norm.weight`, get(`${m}input_layernorm.weight`, [d]));
      tensors.set(`${h}1.layer_norm.weight`, get(`${m}post_attention_layernorm.weight`, [d]));
      let ff = `${h}1.DenseReluDense`;
      if (stack === 'decoder') {
        tensors.set(`${h}1.EncDecAttention.q.weight`, get(`${m}inter_attention.query.weight`, [inner, d]));
        const kv = get(`${m}inter_attention.key_value.weight`, [2 * inner, d]);
        ['k', 'v'].forEach((x, which) => tensors.set(`${h}1.EncDecAttention.${x}.weight`, split(kv, 2, which)));
        tensors.set(`${h}1.EncDecAttention.o.weight`, get(`${m}inter_attention.dense.weight`, [d, inner]));
        tensors.set(`${h}2.layer_norm.weight`, get(`${m}post_inter_attention_layernorm.weight`, [d]));
        ff = `${h}2.DenseReluDense`;
      }
      if (shape.activation === 'relu') tensors.set(`${ff}.wi.weight`, get(`${m}mlp.dense_h_to_4h.weight`, [ffn, d]));
      else {
        tensors.set(`${ff}.wi_0.weight`, get(`${m}mlp.dense_h_to_4h.weight`, [ffn, d]));
        tensors.set(`${ff}.wi_1.weight`, get(`${m}mlp.dense_h_to_4h_2.weight`, [ffn, d]));
      }
      tensors.set(`${ff}.wo.weight`, get(`${m}mlp.dense_4h_to_h.weight`, [d, ffn]));
    }
    tensors.set(`${stack}.final_layer_norm.weight`, get(`enc_dec_model.${stack}.model.final_layernorm.weight`, [d]));
  }
  const unknown = [...sd.keys()].filter((name) => !used.has(name));
  if (unknown.length > 0) {
    const listed = unknown.slice(0, 5).map((name) => `${name} ${shapeText(sd.get(name)!.dims)}`);
    throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: ${unknown.length} tensor(s) the NeMo T5 read here does not have: ${listed.join(', ')}${unknown.length > 5 ? ', ...' : ''}`, { param: unknown[0] });
  }
  if (elementCount(embeddings.dims) === 0) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: the word embeddings are empty`);
  const t5: ModelConfig = {
    // T5's SentencePiece ids (the archive's tokenizer is not read).
    decoder_start_token_id: 0,
    pad_token_id: 0,
    eos_token_id: 1,
    architectures: ['T5ForConditionalGeneration'],
    model_type: 't5',
    is_encoder_decoder: true,
    vocab_size: vocab,
    d_model: d,
    d_kv: headDim,
    d_ff: ffn,
    num_heads: heads,
    num_layers: enc.layers,
    num_decoder_layers: dec.layers,
    relative_attention_num_buckets: enc.buckets,
    relative_attention_max_distance: enc.maxDistance,
    layer_norm_epsilon: enc.eps,
    feed_forward_proj: FEED_FORWARD[enc.activation],
    tie_word_embeddings: false,
  };
  return new Checkpoint(source, t5, tensors);
}
