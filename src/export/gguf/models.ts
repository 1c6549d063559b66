/**
 * What llama.cpp expects of each architecture: its name, hyper-parameter keys and tensor names. Tensors
 * are taken from the checkpoint only when written. Hugging Face's Llama rotates the first half of each
 * head against the second; llama.cpp's `llama` rotates adjacent pairs, so q and k rows (and biases) are
 * interleaved back. Qwen2 is rotated by halves in llama.cpp too (its NeoX style) and kept as is. GPT-2's
 * Conv1D weights are [in, out] and are transposed to the [out, in] of every other linear layer.
 */
import { ChorusError } from '../../errors.ts';
import type { Checkpoint, DecoderSpec } from '../../modelbuild/index.ts';
import type { GgufTensor, GgufValue } from './container.ts';
import { GgmlType, Q8_0_BLOCK } from './encode.ts';

/** The weight types a GGUF is written in. */
export type GgufFileType = 'f32' | 'f16' | 'q8_0';

/** llama.cpp's `general.file_type` of each. */
export const FILE_TYPE_CODE: Record<GgufFileType, number> = { f32: 0, f16: 1, q8_0: 7 };

/** An architecture's metadata and tensors for one checkpoint. */
export interface GgufModel {
  arch: string;
  /** llama.cpp's pre-tokenizer for a BPE vocabulary of this architecture. */
  bpePre: string;
  addBos: boolean;
  metadata: Array<[string, GgufValue]>;
  tensors: GgufTensor[];
}

const u32 = (value: number): GgufValue => ({ type: 'u32', value });
const f32 = (value: number): GgufValue => ({ type: 'f32', value });

/**
 * The type a tensor is stored in: vectors (norms, biases) stay F32, as llama.cpp keeps them; Q8_0 needs
 * rows of whole blocks, and a matrix whose rows are not is stored F16.
 */
function storedType(dims: readonly number[], fileType: GgufFileType): GgmlType {
  if (dims.length === 1 || fileType === 'f32') return GgmlType.F32;
  if (fileType === 'f16' || dims[dims.length - 1]! % Q8_0_BLOCK !== 0) return GgmlType.F16;
  return GgmlType.Q8_0;
}

/** Tensors of `checkpoint` under their GGUF names, each taken when written. */
class TensorPlan {
  readonly tensors: GgufTensor[] = [];
  constructor(
    private readonly checkpoint: Checkpoint,
    private readonly fileType: GgufFileType,
  ) {}

  add(name: string, from: string, dims: number[], transform: (data: Float32Array) => Float32Array = (data) => data, storedDims = dims): void {
    this.tensors.push({ name, dims: storedDims, type: storedType(storedDims, this.fileType), values: () => transform(this.checkpoint.take(from, dims).data) });
  }
}

/** Within each of `heads` heads, rows [first half; second half] become interleaved pairs. */
function halvesToInterleaved(heads: number, cols: number) {
  return (data: Float32Array): Float32Array => {
    const rows = data.length / cols;
    const headSize = rows / heads;
    const half = headSize / 2;
    const out = new Float32Array(data.length);
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < half; i++) {
        const base = h * headSize;
        out.set(data.subarray((base + i) * cols, (base + i + 1) * cols), (base + 2 * i) * cols);
        out.set(data.subarray((base + half + i) * cols, (base + half + i + 1) * cols), (base + 2 * i + 1) * cols);
      }
    }
    return out;
  };
}

function transposed(rows: number, cols: number) {
  return (data: Float32Array): Float32Array => {
    const out = new Float32Array(data.length);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c]!;
    return out;
  };
}

/** The Llama family: `llama` (Llama 2/3, llama2.c) and `qwen2`. */
export function llamaFamily(checkpoint: Checkpoint, spec: DecoderSpec, fileType: GgufFileType): GgufModel {
  const config = checkpoint.config;
  const arch = config.model_type === 'qwen2' ? 'qwen2' : 'llama';
  const { hiddenSize: d, numHeads: heads, numKvHeads: kvHeads, headDim, vocabSize } = spec;
  if (spec.positions.kind !== 'rotary') throw new ChorusError('CHORUS_INTERNAL', 'a Llama-family spec without rotary positions');
  const intermediate = config.intermediate_size as number;
  const qkvBias = arch === 'qwen2' || config.attention_bias === true;
  const tied = config.tie_word_embeddings === true;
  const plan = new TensorPlan(checkpoint, fileType);
  plan.tensors.push({
    name: 'token_embd.weight',
    dims: [vocabSize, d],
    type: storedType([vocabSize, d], fileType),
    values: () => {
      const embed = checkpoint.take('model.embed_tokens.weight', [vocabSize, d]);
      if (tied) checkpoint.takeTiedCopy('lm_head.weight', embed);
      return embed.data;
    },
  });
  const rotate = (n: number, cols: number) => (arch === 'llama' ? halvesToInterleaved(n, cols) : undefined);
  for (let i = 0; i < spec.numLayers; i++) {
    const p = `model.layers.${i}`;
    const b = `blk.${i}`;
    plan.add(`${b}.attn_norm.weight`, `${p}.input_layernorm.weight`, [d]);
    plan.add(`${b}.attn_q.weight`, `${p}.self_attn.q_proj.weight`, [heads * headDim, d], rotate(heads, d));
    plan.add(`${b}.attn_k.weight`, `${p}.self_attn.k_proj.weight`, [kvHeads * headDim, d], rotate(kvHeads, d));
    plan.add(`${b}.attn_v.weight`, `${p}.self_attn.v_proj.weight`, [kvHeads * headDim, d]);
    if (qkvBias) {
      plan.add(`${b}.attn_q.bias`, `${p}.self_attn.q_proj.bias`, [heads * headDim], rotate(heads, 1));
      plan.add(`${b}.attn_k.bias`, `${p}.self_attn.k_proj.bias`, [kvHeads * headDim], rotate(kvHeads, 1));
      plan.add(`${b}.attn_v.bias`, `${p}.self_attn.v_proj.bias`, [kvHeads * headDim]);
    }
    plan.add(`${b}.attn_output.weight`, `${p}.self_attn.o_proj.weight`, [d, heads * headDim]);
    plan.add(`${b}.ffn_norm.weight`, `${p}.post_attention_layernorm.weight`, [d]);
    plan.add(`${b}.ffn_gate.weight`, `${p}.mlp.gate_proj.weight`, [intermediate, d]);
    plan.add(`${b}.ffn_up.weight`, `${p}.mlp.up_proj.weight`, [intermediate, d]);
    plan.add(`${b}.ffn_down.weight`, `${p}.mlp.down_proj.weight`, [d, intermediate]);
  }
  plan.add('output_norm.weight', 'model.norm.weight', [d]);
  if (!tied) plan.add('output.weight', 'lm_head.weight', [vocabSize, d]);
  const metadata: Array<[string, GgufValue]> = [
    [`${arch}.vocab_size`, u32(vocabSize)],
    [`${arch}.context_length`, u32(spec.maxPositions)],
    [`${arch}.embedding_length`, u32(d)],
    [`${arch}.block_count`, u32(spec.numLayers)],
    [`${arch}.feed_forward_length`, u32(intermediate)],
    [`${arch}.attention.head_count`, u32(heads)],
    [`${arch}.attention.head_count_kv`, u32(kvHeads)],
    [`${arch}.attention.layer_norm_rms_epsilon`, f32(spec.normEps)],
    [`${arch}.rope.freq_base`, f32(spec.positions.theta)],
    [`${arch}.rope.dimension_count`, u32(headDim)],
  ];
  if (headDim * heads !== d) metadata.push([`${arch}.attention.key_length`, u32(headDim)], [`${arch}.attention.value_length`, u32(headDim)]);
  return { arch, bpePre: arch === 'qwen2' ? 'qwen2' : 'llama-bpe', addBos: arch === 'llama', metadata, tensors: plan.tensors };
}

/** GPT-2: learned positions, LayerNorm with biases, one fused q/k/v projection, tied head. */
export function gpt2(checkpoint: Checkpoint, spec: DecoderSpec, fileType: GgufFileType): GgufModel {
  const d = spec.hiddenSize;
  const inner = (checkpoint.config.n_inner as number | null | undefined) ?? 4 * d;
  const prefix = checkpoint.has('transformer.wte.weight') ? 'transformer.' : '';
  const plan = new TensorPlan(checkpoint, fileType);
  plan.tensors.push({
    name: 'token_embd.weight',
    dims: [spec.vocabSize, d],
    type: storedType([spec.vocabSize, d], fileType),
    values: () => {
      const embed = checkpoint.take(`${prefix}wte.weight`, [spec.vocabSize, d]);
      checkpoint.takeTiedCopy('lm_head.weight', embed);
      return embed.data;
    },
  });
  plan.add('position_embd.weight', `${prefix}wpe.weight`, [spec.maxPositions, d]);
  const norm = (name: string, from: string): void => {
    plan.add(`${name}.weight`, `${prefix}${from}.weight`, [d]);
    plan.add(`${name}.bias`, `${prefix}${from}.bias`, [d]);
  };
  const conv = (name: string, from: string, inDim: number, outDim: number): void => {
    plan.add(`${name}.weight`, `${prefix}${from}.weight`, [inDim, outDim], transposed(inDim, outDim), [outDim, inDim]);
    plan.add(`${name}.bias`, `${prefix}${from}.bias`, [outDim]);
  };
  for (let i = 0; i < spec.numLayers; i++) {
    const p = `h.${i}`;
    const b = `blk.${i}`;
    norm(`${b}.attn_norm`, `${p}.ln_1`);
    conv(`${b}.attn_qkv`, `${p}.attn.c_attn`, d, 3 * d);
    conv(`${b}.attn_output`, `${p}.attn.c_proj`, d, d);
    norm(`${b}.ffn_norm`, `${p}.ln_2`);
    conv(`${b}.ffn_up`, `${p}.mlp.c_fc`, d, inner);
    conv(`${b}.ffn_down`, `${p}.mlp.c_proj`, inner, d);
    for (const buffer of [`${prefix}${p}.attn.bias`, `${prefix}${p}.attn.masked_bias`]) if (checkpoint.has(buffer)) checkpoint.skip(buffer);
  }
  norm('output_norm', 'ln_f');
  const metadata: Array<[string, GgufValue]> = [
    ['gpt2.vocab_size', u32(spec.vocabSize)],
    ['gpt2.context_length', u32(spec.maxPositions)],
    ['gpt2.embedding_length', u32(d)],
    ['gpt2.block_count', u32(spec.numLayers)],
    ['gpt2.feed_forward_length', u32(inner)],
    ['gpt2.attention.head_count', u32(spec.numHeads)],
    ['gpt2.attention.layer_norm_epsilon', f32(spec.normEps)],
  ];
  return { arch: 'gpt2', bpePre: 'gpt-2', addBos: false, metadata, tensors: plan.tensors };
}
