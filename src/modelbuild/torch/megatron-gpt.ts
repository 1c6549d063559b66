/**
 * A Megatron-LM GPT split over tensor-parallel ranks, merged into one GPT-2 checkpoint (the layout
 * the gpt2 architecture reads: Conv1D weights [in, out] under `transformer.`). Per rank, Megatron holds:
 * - the word embeddings split by vocabulary rows (vocab-parallel): merged by concatenating rows;
 * - column-parallel linears (query_key_value, dense_h_to_4h) split by output rows of their [out, in]
 *   weight, biases split alike: merged by rows;
 * - row-parallel linears (attention dense, dense_4h_to_h) split by input columns, their bias whole on
 *   every rank: merged by columns, the bias taken from rank 0; norms and position embeddings whole.
 * The fused query_key_value orders its rows per rank by checkpoint_version: 0 as [3, heads, head_dim],
 * 1.0 as [heads, head_dim, 3], 2.0 and later as [heads, 3, head_dim] (heads of that rank).
 * Merged tensors are lazy: each is computed from the ranks' tensors when the graph reads it.
 */
import { ChorusError } from '../../errors.ts';
import { Checkpoint, type ModelConfig } from '../checkpoint.ts';
import { elementCount, shapeText, type Tensor } from '../tensor.ts';

/** One tensor-parallel rank's weights in Megatron-LM's names. */
export interface MegatronRank {
  /** The file they came from, for messages. */
  readonly source: string;
  readonly wordEmbeddings: Tensor;
  readonly positionEmbeddings: Tensor;
  /** The transformer's tensors as Megatron names them: `layers.N.input_layernorm.weight`, ..., `final_layernorm.bias`. */
  readonly transformer: Map<string, Tensor>;
}

/** The model's shape, from Megatron's args, NeMo's config or the tensors. */
export interface MegatronGptShape {
  readonly numLayers: number;
  readonly hiddenSize: number;
  readonly numHeads: number;
  readonly ffnHiddenSize: number;
  readonly layerNormEps: number;
  readonly checkpointVersion: number;
  /** Keep only the first rows of the (padded) merged vocabulary. Default: all of them. */
  readonly vocabSize?: number;
}

/** The ranks merged as a GPT-2 checkpoint; `baseConfig` supplies fields beyond the shape (token ids). */
export function mergeMegatronGpt(source: string, ranks: readonly MegatronRank[], shape: MegatronGptShape, baseConfig: ModelConfig = {}): Checkpoint {
  const tp = ranks.length;
  const { hiddenSize: d, numHeads, ffnHiddenSize: ffn, numLayers } = shape;
  if (numHeads % tp !== 0 || d % numHeads !== 0 || ffn % tp !== 0) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source}: ${numHeads} heads of hidden size ${d} and ffn size ${ffn} do not split over ${tp} tensor-parallel ranks`);
  }
  const headDim = d / numHeads;
  const localHeads = numHeads / tp;
  const rank0 = ranks[0]!;
  const attention = rank0.transformer.has('layers.0.attention.query_key_value.weight') ? 'attention' : 'self_attention';
  const used = new Set<string>();
  const part = (r: number, name: string, dims: number[]): Tensor => {
    const rank = ranks[r]!;
    const tensor = rank.transformer.get(name);
    if (tensor === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${rank.source}: tensor ${name} is missing (expected shape ${shapeText(dims)})`, { param: name });
    checkShape(rank.source, name, tensor, dims);
    used.add(name);
    return tensor;
  };
  const parts = (name: string, dims: number[]): Tensor[] => ranks.map((_, r) => part(r, name, dims));
  const whole = (name: string, dims: number[]): Tensor => parts(name, dims)[0]!;

  const vocabRows = ranks.map((rank) => rank.wordEmbeddings.dims[0] ?? 0);
  ranks.forEach((rank) => checkShape(rank.source, 'word_embeddings.weight', rank.wordEmbeddings, [rank.wordEmbeddings.dims[0] ?? 0, d]));
  const paddedVocab = vocabRows.reduce((a, b) => a + b, 0);
  const vocab = shape.vocabSize ?? paddedVocab;
  if (vocab > paddedVocab) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: vocab_size ${vocab} is larger than the ${paddedVocab} rows of the word embeddings`, { param: 'vocab_size' });
  const positions = rank0.positionEmbeddings.dims[0] ?? 0;
  checkShape(rank0.source, 'position_embeddings.weight', rank0.positionEmbeddings, [positions, d]);

  const tensors = new Map<string, Tensor>();
  const put = (name: string, dims: number[], from: readonly Tensor[], compute: (sources: Float32Array[], out: Float32Array) => void): void => {
    tensors.set(name, {
      dims,
      ...(from[0]?.dtype === undefined ? {} : { dtype: from[0].dtype }),
      get data() {
        const out = new Float32Array(elementCount(dims));
        compute(from.map((t) => t.data), out);
        return out;
      },
    });
  };
  const copy = (name: string, tensor: Tensor): void => put(name, tensor.dims, [tensor], ([values], out) => out.set(values!.subarray(0, out.length)));

  put('transformer.wte.weight', [vocab, d], ranks.map((rank) => rank.wordEmbeddings), (sources, out) => {
    let at = 0;
    for (const values of sources) {
      const n = Math.min(values.length, out.length - at);
      out.set(values.subarray(0, n), at);
      at += n;
    }
  });
  copy('transformer.wpe.weight', rank0.positionEmbeddings);
  const qkvRow = fusedRowOrder(shape.checkpointVersion, localHeads, headDim, d);
  for (let i = 0; i < numLayers; i++) {
    const m = `layers.${i}.`;
    const h = `transformer.h.${i}.`;
    copy(`${h}ln_1.weight`, whole(`${m}input_layernorm.weight`, [d]));
    copy(`${h}ln_1.bias`, whole(`${m}input_layernorm.bias`, [d]));
    // query_key_value [3d/tp, d] per rank -> c_attn [d, 3d] as [q | k | v], heads in rank order.
    const localQkv = (3 * d) / tp;
    put(`${h}attn.c_attn.weight`, [d, 3 * d], parts(`${m}${attention}.query_key_value.weight`, [localQkv, d]), (sources, out) => {
      sources.forEach((w, r) => {
        for (let row = 0; row < localQkv; row++) {
          const column = qkvRow(row, r);
          for (let c = 0; c < d; c++) out[c * 3 * d + column] = w[row * d + c]!;
        }
      });
    });
    put(`${h}attn.c_attn.bias`, [3 * d], parts(`${m}${attention}.query_key_value.bias`, [localQkv]), (sources, out) => {
      sources.forEach((b, r) => {
        for (let row = 0; row < localQkv; row++) out[qkvRow(row, r)] = b[row]!;
      });
    });
    put(`${h}attn.c_proj.weight`, [d, d], parts(`${m}${attention}.dense.weight`, [d, d / tp]), (sources, out) => byColumnsTransposed(sources, out, d, d / tp));
    copy(`${h}attn.c_proj.bias`, whole(`${m}${attention}.dense.bias`, [d]));
    copy(`${h}ln_2.weight`, whole(`${m}post_attention_layernorm.weight`, [d]));
    copy(`${h}ln_2.bias`, whole(`${m}post_attention_layernorm.bias`, [d]));
    put(`${h}mlp.c_fc.weight`, [d, ffn], parts(`${m}mlp.dense_h_to_4h.weight`, [ffn / tp, d]), (sources, out) => {
      const local = ffn / tp;
      sources.forEach((w, r) => {
        for (let k = 0; k < local; k++) for (let c = 0; c < d; c++) out[c * ffn + r * local + k] = w[k * d + c]!;
      });
    });
    put(`${h}mlp.c_fc.bias`, [ffn], parts(`${m}mlp.dense_h_to_4h.bias`, [ffn / tp]), (sources, out) => sources.forEach((b, r) => out.set(b, r * (ffn / tp))));
    put(`${h}mlp.c_proj.weight`, [ffn, d], parts(`${m}mlp.dense_4h_to_h.weight`, [d, ffn / tp]), (sources, out) => byColumnsTransposed(sources, out, d, ffn / tp));
    copy(`${h}mlp.c_proj.bias`, whole(`${m}mlp.dense_4h_to_h.bias`, [d]));
  }
  copy('transformer.ln_f.weight', whole('final_layernorm.weight', [d]));
  copy('transformer.ln_f.bias', whole('final_layernorm.bias', [d]));
  for (const rank of ranks) {
    const unknown = [...rank.transformer.keys()].filter((name) => !used.has(name));
    if (unknown.length > 0) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `${rank.source}: ${unknown.length} tensor(s) a GPT-2 style Megatron model does not have: ${unknown.slice(0, 5).join(', ')}${unknown.length > 5 ? ', ...' : ''}`, { param: unknown[0] });
    }
  }
  const config: ModelConfig = {
    ...baseConfig,
    model_type: 'gpt2',
    architectures: ['GPT2LMHeadModel'],
    vocab_size: vocab,
    n_positions: positions,
    n_embd: d,
    n_layer: numLayers,
    n_head: numHeads,
    n_inner: ffn,
    activation_function: 'gelu_new',
    layer_norm_epsilon: shape.layerNormEps,
    scale_attn_weights: true,
    tie_word_embeddings: true,
  };
  return new Checkpoint(source, config, tensors);
}

/**
 * Where row `row` of rank `r`'s fused query_key_value lands among c_attn's 3d output columns
 * ([q | k | v], each head-major over all heads).
 */
function fusedRowOrder(version: number, localHeads: number, headDim: number, d: number): (row: number, r: number) => number {
  const place = (which: number, head: number, i: number, r: number): number => which * d + (r * localHeads + head) * headDim + i;
  if (version === 0) return (row, r) => place(Math.floor(row / (localHeads * headDim)), Math.floor(row / headDim) % localHeads, row % headDim, r);
  if (version === 1) return (row, r) => place(row % 3, Math.floor(row / (3 * headDim)), Math.floor(row / 3) % headDim, r);
  return (row, r) => place(Math.floor(row / headDim) % 3, Math.floor(row / (3 * headDim)), row % headDim, r);
}

/** Row-parallel [out, local] weights, concatenated by columns and transposed to Conv1D's [in, out]. */
function byColumnsTransposed(sources: Float32Array[], out: Float32Array, outDim: number, local: number): void {
  sources.forEach((w, r) => {
    for (let o = 0; o < outDim; o++) for (let k = 0; k < local; k++) out[(r * local + k) * outDim + o] = w[o * local + k]!;
  });
}

function checkShape(source: string, name: string, tensor: Tensor, dims: readonly number[]): void {
  if (tensor.dims.length !== dims.length || tensor.dims.some((n, i) => n !== dims[i])) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source}: tensor ${name} has shape ${shapeText(tensor.dims)}, expected ${shapeText(dims)}`, { param: name });
  }
}
