/**
 * llama2.c model files (`run.c`'s version-0 format): seven int32s (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size — negative when the classifier is not shared —, seq_len), then float32 weights
 * in a fixed order. They are read into Hugging Face Llama names and layout, so one architecture file
 * builds both. llama2.c rotates adjacent pairs of q/k dimensions; Hugging Face rotates the first half
 * against the second, so q and k rows are permuted as the Hugging Face conversion does.
 */
import { ChorusError } from '../errors.ts';
import { Checkpoint } from './checkpoint.ts';
import { fileRanges, truncated } from './file-range.ts';
import { storedTensor, type Tensor } from './tensor.ts';

/** Reads a llama2.c `.bin` as a Llama checkpoint, lazily: each weight is read when it is used. */
export function readLlama2cCheckpoint(file: string): Checkpoint {
  const ranges = fileRanges(file);
  if (ranges.size < 28) throw new ChorusError('CHORUS_FILE_INVALID', `${file} is too short to be a llama2.c model`);
  const head = Buffer.from(ranges.read(0, 28));
  const header = Array.from({ length: 7 }, (_, i) => head.readInt32LE(i * 4));
  const [dim, hiddenDim, layers, heads, kvHeads, signedVocab, seqLen] = header as [number, number, number, number, number, number, number];
  const shared = signedVocab > 0;
  const vocab = Math.abs(signedVocab);
  const headSize = dim / heads;
  const kvDim = kvHeads * headSize;
  if (!(dim > 0 && hiddenDim > 0 && layers > 0 && heads > 0 && kvHeads > 0 && vocab > 0 && seqLen > 0 && Number.isInteger(headSize))) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${file} has an impossible llama2.c header: ${header.join(', ')}`);
  }
  let offset = 28;
  const read = (dims: number[]): Tensor => {
    const at = offset;
    offset += dims.reduce((a, b) => a * b, 1) * 4;
    return storedTensor(dims, 'F32', (start, count) => ranges.read(at + start * 4, count * 4));
  };
  const perLayer = (dims: number[]): Tensor[] => Array.from({ length: layers }, () => read(dims));

  const embed = read([vocab, dim]);
  const attnNorm = perLayer([dim]);
  const wq = perLayer([dim, dim]);
  const wk = perLayer([kvDim, dim]);
  const wv = perLayer([kvDim, dim]);
  const wo = perLayer([dim, dim]);
  const ffnNorm = perLayer([dim]);
  const w1 = perLayer([hiddenDim, dim]);
  const w2 = perLayer([dim, hiddenDim]);
  const w3 = perLayer([hiddenDim, dim]);
  const finalNorm = read([dim]);
  offset += seqLen * headSize * 4; // freq_cis_real and freq_cis_imag: rotary tables, recomputed by the builder
  const classifier = shared ? undefined : read([vocab, dim]);
  if (offset > ranges.size) throw truncated(file, offset, ranges.size, `its header (${header.join(', ')})`);
  if (offset !== ranges.size) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${file} has ${ranges.size - offset} bytes after its weights; the header (${header.join(', ')}) does not describe it`);
  }

  const tensors = new Map<string, Tensor>([
    ['model.embed_tokens.weight', embed],
    ['model.norm.weight', finalNorm],
  ]);
  if (classifier) tensors.set('lm_head.weight', classifier);
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}`;
    tensors.set(`${p}.input_layernorm.weight`, attnNorm[l]!);
    tensors.set(`${p}.post_attention_layernorm.weight`, ffnNorm[l]!);
    tensors.set(`${p}.self_attn.q_proj.weight`, interleavedToHalves(wq[l]!, heads));
    tensors.set(`${p}.self_attn.k_proj.weight`, interleavedToHalves(wk[l]!, kvHeads));
    tensors.set(`${p}.self_attn.v_proj.weight`, wv[l]!);
    tensors.set(`${p}.self_attn.o_proj.weight`, wo[l]!);
    tensors.set(`${p}.mlp.gate_proj.weight`, w1[l]!);
    tensors.set(`${p}.mlp.down_proj.weight`, w2[l]!);
    tensors.set(`${p}.mlp.up_proj.weight`, w3[l]!);
  }
  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: dim,
    intermediate_size: hiddenDim,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    vocab_size: vocab,
    max_position_embeddings: seqLen,
    rms_norm_eps: 1e-5,
    rope_theta: 10000.0,
    hidden_act: 'silu',
    tie_word_embeddings: shared,
    bos_token_id: 1,
    eos_token_id: 2,
    torch_dtype: 'float32',
  };
  return new Checkpoint(file, config, tensors);
}

/**
 * Reorders the rows of a q or k projection ([heads * headSize, dim]) from llama2.c's interleaved rotary
 * pairs to Hugging Face's halves: within each head, row 2i goes to i and row 2i+1 to headSize/2 + i
 * (lazy: when the values are read).
 */
function interleavedToHalves(weight: Tensor, heads: number): Tensor {
  const [rows, cols] = weight.dims as [number, number];
  const headSize = rows / heads;
  const half = headSize / 2;
  return {
    dims: [rows, cols],
    get data() {
      const source = weight.data;
      const out = new Float32Array(source.length);
      for (let h = 0; h < heads; h++) {
        for (let i = 0; i < headSize; i++) {
          const target = h * headSize + (i % 2 === 0 ? i / 2 : half + (i - 1) / 2);
          out.set(source.subarray((h * headSize + i) * cols, (h * headSize + i + 1) * cols), target * cols);
        }
      }
      return out;
    },
  };
}
