/**
 * The decoder graph in the Optimum / transformers.js layout: `input_ids`, `attention_mask`,
 * `position_ids` and `past_key_values.{i}.key|value` in; `logits` and `present.{i}.key|value` out.
 * Keys and values are [batch, kv_heads, length, head_dim]; a past of length 0 is the prefill.
 * Standard ONNX operators only (opset 17), so any execution provider runs it.
 */
import { ChorusError } from '../errors.ts';
import type { DecoderLayerWeights, DecoderSpec, DecoderWeights, Linear, Norm } from './decoder-spec.ts';
import type { FloatType } from './float-bits.ts';
import { foldNormsIntoLinear, foldPostNormsIntoLinear } from './fold-norms.ts';
import { float, GraphBuilder } from './graph.ts';
import { GREEDY_PAD_ID } from './greedy-layout.ts';
import { quantizedWeight } from './quant/graph.ts';
import { inverseFrequencies } from './rope-frequencies.ts';
import type { TensorParallelGraph } from './tensor-parallel.ts';
import { gatheredLogits, rowParallel, vocabParallelEmbedding } from './tensor-parallel-graph.ts';
import {
  additiveMask,
  addonLinear,
  lastPosition,
  affine,
  capped,
  defaultSlotLinear,
  FLOAT32_MIN,
  gatedLinear,
  geluPytorchTanh,
  geluTanh,
  linear,
  quantizedGatedLinear,
  linearWeights,
  linearWith,
  maskedSoftmax,
  matMul,
  MS,
  norm,
  packedQkv,
  plainWeights,
  type Projected,
  projectBiasAfter,
  required,
  silu,
  skipNorm,
  type SlotLinear,
  withBias,
} from './layers.ts';

/** float16's and bfloat16's lowest values: the cuda flavor's attention bias where a position may not be attended. */
const FLOAT16_MIN = -65504;
const BFLOAT16_MIN = -3.3895313892515355e38;

/** What every block of one graph shares. */
interface GraphContext {
  spec: DecoderSpec;
  flavor: Flavor;
  positionIds: string;
  bias: string;
  /** The bias of the sliding-window layers (their window as well as the mask), when the model has any. */
  windowBias: string | undefined;
  rotary: Rotary | undefined;
  cacheLengths: { seqlensK: string; total: string; blockTable?: string } | undefined;
  /**
   * The slot decoder: one projection for q, k and v (their weights concatenated in the graph, which
   * ONNX Runtime folds into one initializer when the session loads, so the data file stays shared) into
   * the native addon's DecoderSlotAttention (its bias added there), or, for rotary models,
   * GroupQueryAttention, which also applies the rotary embedding. Not for rotary heads whose size is not
   * a multiple of 16 (those keep RotaryEmbedding and separate projections).
   */
  fused: boolean;
  /** The slot decoder's attention (see slotRotaryInAddon for rotary models; paged: for every model). */
  slotAttention: SlotAttentionKind;
  /** A tensor-parallel rank's split (the spec's heads are then the rank's). */
  tp: TensorParallelGraph | undefined;
}

/**
 * The slot decoder's attention: the addon's (DecoderSlotAttention, or PagedAttention over the slots for
 * Qwen3), GroupQueryAttention, the addon's PagedAttention over the slots for every rotary model
 * (`PagedAttention`), or the paged decoder's PagedAttention through a block table (`paged`).
 */
type SlotAttentionKind = SlotDecoderAttention | 'paged';

/** What a build may ask of the slot decoder's attention (BuildOptions.slotAttention). */
export const SLOT_DECODER_ATTENTIONS = ['addon', 'GroupQueryAttention', 'PagedAttention'] as const;
export type SlotDecoderAttention = (typeof SLOT_DECODER_ATTENTIONS)[number];

/** The paged decoder's file, beside the slot decoder (its weights in the same data file). */
export const PAGED_DECODER_MODEL = 'decoder_model_paged.onnx';

/** Rotary embeddings: cos/sin per position (portable), or the caches RotaryEmbedding reads (cuda). */
type Rotary = { kind: 'tables'; cos: string; sin: string } | { kind: 'caches'; cos: string; sin: string };

/** Which operators the graph uses: standard ONNX only, or ONNX Runtime's fused contrib operators. */
export type Flavor = 'portable' | 'cuda';

/** The decoder's inputs inside a graph: int64 ids, mask and positions, and each layer's past key and value. */
interface DecoderInputs {
  inputIds: string;
  attentionMask: string;
  positionIds: string;
  past: Array<{ key: string; value: string }>;
}

/** Builds the decoder graph of `spec` with `weights`. */
export function buildDecoderGraph(spec: DecoderSpec, weights: DecoderWeights, floatType: FloatType, flavor: Flavor = 'portable'): GraphBuilder {
  // Both flavors round as PyTorch does. In the cuda flavor that touches only the biased projections left
  // as MatMul (q, k and v: the others' biases go into FastGelu and the fused residual norms) and SiLU.
  const g = new GraphBuilder(floatType);
  const { numLayers, numKvHeads, headDim, vocabSize } = spec;
  const inputs: DecoderInputs = {
    inputIds: g.input('input_ids', 'int64', ['batch_size', 'sequence_length']),
    attentionMask: g.input('attention_mask', 'int64', ['batch_size', 'total_sequence_length']),
    positionIds: g.input('position_ids', 'int64', ['batch_size', 'sequence_length']),
    past: Array.from({ length: numLayers }, (_, i) => ({
      key: g.input(`past_key_values.${i}.key`, floatType, ['batch_size', numKvHeads, 'past_sequence_length', headDim]),
      value: g.input(`past_key_values.${i}.value`, floatType, ['batch_size', numKvHeads, 'past_sequence_length', headDim]),
    })),
  };
  const { logits, present } = decoderBody(g, spec, weights, flavor, inputs, false);
  present.forEach((p, i) => {
    g.output(`present.${i}.key`, p.key, floatType, ['batch_size', numKvHeads, 'total_sequence_length', headDim]);
    g.output(`present.${i}.value`, p.value, floatType, ['batch_size', numKvHeads, 'total_sequence_length', headDim]);
  });
  g.output('logits', logits, floatType, ['batch_size', 'sequence_length', vocabSize]);
  return g;
}

/**
 * The decoder the native engine runs over a cache of slots that stays on the device: each layer's
 * past key and value is one preallocated [slots, kv_heads, max_length, head_dim] buffer, bound as both
 * the past input and the present output, and the attention (the addon's DecoderSlotAttention, or
 * GroupQueryAttention for rotary models) writes each row's new keys in place at its own length. In:
 * int64 `input_ids` and `position_ids` [batch, seq], int32 `seqlens_k` [batch] (each row's length
 * after this run, minus one) and `total_sequence_length` (a scalar, the longest of them; read by
 * GroupQueryAttention only), and `past_key_values.{i}.key|value`; where the head is the addon's Linear
 * taking the last position itself (float16 and bfloat16 builds, norms folded), also int32 `last_index`
 * [batch]: each row's position whose logits a run of several positions gives (a ragged prefill's rows,
 * right-padded, in one run; a decode step's is unread). Out: the last position's (or last_index's)
 * `logits` [batch, 1, vocab] and `present.{i}.key|value` (the same buffers). No attention mask: rows are
 * never padded, each has its own length. Always the fused contrib operators (the weights match the cuda flavor's, in its order,
 * so both models can share one external data file).
 */
export function buildSlotDecoderGraph(
  spec: DecoderSpec,
  weights: DecoderWeights,
  floatType: FloatType,
  attention: SlotDecoderAttention = 'addon',
  projections: SlotLinear = defaultSlotLinear(floatType),
  tp?: TensorParallelGraph,
): GraphBuilder {
  // Fused operators; the addon's Linear rounds each product with its bias (and activation) once itself,
  // so no padded products here (with MatMul projections, the bias is added after).
  const g = new GraphBuilder(floatType, { pytorchRounding: false, addonLinear: projections === 'addon' });
  const { numLayers, numKvHeads, headDim, vocabSize } = spec;
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 'sequence_length']);
  const positionIds = g.input('position_ids', 'int64', ['batch_size', 'sequence_length']);
  const seqlensK = g.input('seqlens_k', 'int32', ['batch_size']);
  const total = g.input('total_sequence_length', 'int32', []);
  const past = Array.from({ length: numLayers }, (_, i) => ({
    key: g.input(`past_key_values.${i}.key`, floatType, ['batch_size', numKvHeads, 'max_length', headDim]),
    value: g.input(`past_key_values.${i}.value`, floatType, ['batch_size', numKvHeads, 'max_length', headDim]),
  }));
  const { logits, present } = decoderBody(g, spec, weights, 'cuda', { inputIds, attentionMask: '', positionIds, past }, true, { seqlensK, total, attention, lastIndex: true }, tp);
  present.forEach((p, i) => {
    g.output(`present.${i}.key`, p.key, floatType, ['batch_size', numKvHeads, 'max_length', headDim]);
    g.output(`present.${i}.value`, p.value, floatType, ['batch_size', numKvHeads, 'max_length', headDim]);
  });
  g.output('logits', logits, floatType, ['batch_size', 1, vocabSize]);
  foldNorms(g);
  return g;
}

/**
 * The slot decoder over a paged cache (the native engine's, when a cache of whole slots would not fit
 * the device): each layer's past key and value is one pool of blocks [blocks, kv_heads, block_size,
 * head_dim], bound as both past and present, and the addon's PagedAttention applies the rotary
 * embedding, writes each row's new keys into its blocks and attends over them through `block_table`
 * (int32 [batch, max_blocks]: row r's position j lives in block block_table[r, j / block_size]). The
 * other inputs and outputs are the slot decoder's, without `total_sequence_length`. Weights in the slot
 * decoder's order, so the two share one data file.
 */
export function buildPagedDecoderGraph(
  spec: DecoderSpec,
  weights: DecoderWeights,
  floatType: GraphBuilder['floatType'],
  projections: SlotLinear = defaultSlotLinear(floatType),
  tp?: TensorParallelGraph,
): GraphBuilder {
  if (spec.positions.kind === 'rotary' && spec.headDim % 2 !== 0) throw new Error(`the paged decoder rotates heads of an even size, not ${spec.headDim}`);
  const g = new GraphBuilder(floatType, { pytorchRounding: false, addonLinear: projections === 'addon' });
  const { numLayers, numKvHeads, headDim, vocabSize } = spec;
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 'sequence_length']);
  const positionIds = g.input('position_ids', 'int64', ['batch_size', 'sequence_length']);
  const seqlensK = g.input('seqlens_k', 'int32', ['batch_size']);
  const blockTable = g.input('block_table', 'int32', ['batch_size', 'max_blocks']);
  const past = Array.from({ length: numLayers }, (_, i) => ({
    key: g.input(`past_key_values.${i}.key`, floatType, ['blocks', numKvHeads, 'block_size', headDim]),
    value: g.input(`past_key_values.${i}.value`, floatType, ['blocks', numKvHeads, 'block_size', headDim]),
  }));
  const lengths = { seqlensK, total: '', blockTable, attention: 'paged' as const };
  const { logits, present } = decoderBody(g, spec, weights, 'cuda', { inputIds, attentionMask: '', positionIds, past }, true, lengths, tp);
  present.forEach((p, i) => {
    g.output(`present.${i}.key`, p.key, floatType, ['blocks', numKvHeads, 'block_size', headDim]);
    g.output(`present.${i}.value`, p.value, floatType, ['blocks', numKvHeads, 'block_size', headDim]);
  });
  g.output('logits', logits, floatType, ['batch_size', 1, vocabSize]);
  foldNorms(g);
  return g;
}

/**
 * The slot decoders' RMSNorms folded into the addon's Linear after them (foldNormsIntoLinear), then
 * Gemma 2's post-norms into the Linear whose pre-norm follows them (foldPostNormsIntoLinear), unless
 * CHORUS_FOLD_NORMS=0 (to measure against; CHORUS_FOLD_NORMS=pre: the pre-norms alone, and the head
 * after a Slice, so the final norm stays apart).
 */
function foldNorms(g: GraphBuilder): void {
  if (!g.addonLinear || process.env.CHORUS_FOLD_NORMS === '0') return;
  g.rewriteNodes(foldNormsIntoLinear);
  if (foldsAll()) g.rewriteNodes(foldPostNormsIntoLinear);
}

/** Whether the post-norms and the final norm fold too (CHORUS_FOLD_NORMS=pre: the pre-norms alone). */
function foldsAll(): boolean {
  const setting = process.env.CHORUS_FOLD_NORMS;
  return setting !== '0' && setting !== 'pre';
}

/** Ids of the GreedySearch model: where generation ends, and what pads a prompt or a finished row. */
export interface GreedySearchIds {
  /** The model's end id; -1 when it has none. */
  eosTokenId: number;
}

/**
 * The whole greedy decoding loop as one model: ONNX Runtime's GreedySearch operator (com.microsoft)
 * around the decoder, so each step's cache stays where the session runs (on the GPU with CUDA) and
 * nothing returns to JavaScript until the search ends. In: `input_ids` int32 [batch, seq] (left-padded
 * with GREEDY_PAD_ID), `max_length` int32 [1] (prompt plus new tokens), `min_length` int32 [1],
 * `repetition_penalty` float [1], `attention_mask` int32 [batch, seq]. Out: `sequences` int32
 * [batch, max_length], the prompt then the generated ids, padded after the end id. The decoder inside
 * takes the operator's interface (int32 ids, each layer's past as one [2, batch, kv_heads, past,
 * head_dim] tensor) and computes the last position's logits only; its weights are initializers of the
 * outer graph, in the same order as the decoder model's, so both can share one external data file.
 */
export function buildGreedySearchGraph(spec: DecoderSpec, weights: DecoderWeights, floatType: FloatType, flavor: Flavor, ids: GreedySearchIds): GraphBuilder {
  const inner = new GraphBuilder(floatType);
  const { numLayers, numKvHeads, headDim, vocabSize } = spec;
  // Declared in the order the operator checks: input_ids, position_ids, attention_mask, past_0...
  const ids32 = inner.input('input_ids', 'int32', ['batch_size', 'sequence_length']);
  const positions32 = inner.input('position_ids', 'int32', ['batch_size', 'sequence_length']);
  const mask32 = inner.input('attention_mask', 'int32', ['batch_size', 'total_sequence_length']);
  const pastInputs = Array.from({ length: numLayers }, (_, i) => inner.input(`past_${i}`, floatType, [2, 'batch_size', numKvHeads, 'past_sequence_length', headDim]));
  const int64 = (name: string): string => inner.op('Cast', [name], { to: 7 });
  const at = (value: string, index: number): string => inner.op('Gather', [value, inner.int64([index], [])], { axis: 0 });
  const inputs: DecoderInputs = {
    inputIds: int64(ids32),
    positionIds: int64(positions32),
    attentionMask: int64(mask32),
    past: pastInputs.map((past) => ({ key: at(past, 0), value: at(past, 1) })),
  };
  const { logits, present } = decoderBody(inner, spec, weights, flavor, inputs, true);
  inner.output('logits', logits, floatType, ['batch_size', 1, vocabSize]);
  present.forEach((p, i) => {
    const stacked = inner.op('Concat', [inner.op('Unsqueeze', [p.key, inner.int64([0])]), inner.op('Unsqueeze', [p.value, inner.int64([0])])], { axis: 0 });
    inner.output(`present_${i}`, stacked, floatType, [2, 'batch_size', numKvHeads, 'total_sequence_length', headDim]);
  });

  const g = new GraphBuilder(floatType);
  const decoder = g.adopt(inner, 'decoder');
  const inputIds = g.input('input_ids', 'int32', ['batch_size', 'sequence_length']);
  const maxLength = g.input('max_length', 'int32', [1]);
  const minLength = g.input('min_length', 'int32', [1]);
  const repetitionPenalty = g.input('repetition_penalty', 'float32', [1]);
  const attentionMask = g.input('attention_mask', 'int32', ['batch_size', 'sequence_length']);
  const sequences = g.op(
    'GreedySearch',
    [inputIds, maxLength, minLength, repetitionPenalty, '', '', attentionMask],
    { eos_token_id: ids.eosTokenId, pad_token_id: GREEDY_PAD_ID, model_type: 0, vocab_size: vocabSize, decoder },
    { domain: MS, name: 'greedy_search' },
  );
  g.output('sequences', sequences, 'int32', ['batch_size', 'max_length']);
  return g;
}

/** The decoder itself, from its inputs to its logits (every position, or the last only) and grown cache. */
function decoderBody(
  g: GraphBuilder,
  spec: DecoderSpec,
  weights: DecoderWeights,
  flavor: Flavor,
  inputs: DecoderInputs,
  lastOnly: boolean,
  slotLengths?: { seqlensK: string; total: string; blockTable?: string; attention: SlotAttentionKind; lastIndex?: boolean },
  tp?: TensorParallelGraph,
): { logits: string; present: Array<{ key: string; value: string }> } {
  const { numLayers, vocabSize } = spec;
  const { inputIds, attentionMask, positionIds, past } = inputs;
  const embedTokens = g.weight('embed_tokens.weight', weights.embedTokens);
  let x = tp === undefined ? g.op('Gather', [embedTokens, inputIds], { axis: 0 }, { name: 'embed' }) : vocabParallelEmbedding(g, tp, embedTokens, inputIds);
  // In the float type, as transformers rounds its normalizer (Gemma: sqrt(hidden)).
  if (spec.embedScale !== undefined) x = g.op('Mul', [x, g.floatConstant([spec.embedScale], [])], {}, { name: 'embed_scale' });
  if (spec.positions.kind === 'learned') {
    const table = g.weight('embed_positions.weight', required(weights.embedPositions, 'position embeddings'));
    x = g.op('Add', [x, g.op('Gather', [table, positionIds], { axis: 0 })]);
  }
  const context: GraphContext = {
    spec,
    flavor,
    positionIds,
    // The slot decoder's rows are unpadded and GroupQueryAttention masks the future itself: no bias.
    bias: slotLengths === undefined ? attentionBias(g, inputIds, attentionMask, flavor) : '',
    windowBias: slotLengths === undefined && spec.slidingWindow !== undefined ? attentionBias(g, inputIds, attentionMask, flavor, spec.slidingWindow.size) : undefined,
    rotary: spec.positions.kind === 'rotary' ? rotary(g, positionIds, spec, flavor) : undefined,
    // GroupQueryAttention also for soft-capped models, which MultiHeadAttention cannot cap.
    cacheLengths: slotLengths ?? (flavor === 'cuda' && (spec.numKvHeads !== spec.numHeads || spec.attnSoftcap !== undefined) ? cacheLengths(g, inputIds, attentionMask) : undefined),
    // GroupQueryAttention rotates heads whose size is a multiple of 16 only.
    fused: slotLengths !== undefined && (spec.positions.kind !== 'rotary' || spec.headDim % 16 === 0 || slotLengths.attention === 'paged'),
    slotAttention: slotLengths?.attention ?? 'GroupQueryAttention',
    tp,
  };

  // The residual stream: each block adds to x, and the norm that follows is taken of the sum (fused
  // into one Skip*Normalization in the cuda flavor).
  const present: Array<{ key: string; value: string }> = [];
  // The slot decoders take the first RMSNorm as ONNX Runtime's one kernel (float32 inside, rounded once,
  // as its fused residual norms after it), not seven a step.
  let h =
    slotLengths !== undefined && spec.norm === 'rmsnorm'
      ? g.op('SimplifiedLayerNormalization', [x, g.weight('layers.0.input_norm.weight', weights.layers[0]!.inputNorm.weight)], { axis: -1, epsilon: float(spec.normEps), stash_type: 1 })
      : norm(g, spec, weights.layers[0]!.inputNorm, x, 'layers.0.input_norm');
  weights.layers.forEach((layer, i) => {
    const attention = attend(g, context, layer, i, h, past[i]!);
    present.push({ key: attention.presentKey, value: attention.presentValue });
    const attentionOut = outputNorm(g, context, layer.postAttnNorm, attention.output, `layers.${i}.post_attention_norm`);
    const afterAttention = residualNorm(g, context, layer.postNorm, x, attentionOut, `layers.${i}.post_norm`);
    const mlpOut = outputNorm(g, context, layer.postMlpNorm, mlp(g, context, layer, i, afterAttention.normed), `layers.${i}.post_mlp_norm`);
    const nextNorm = weights.layers[i + 1]?.inputNorm ?? weights.finalNorm;
    const afterMlp = residualNorm(g, context, nextNorm, afterAttention.sum, mlpOut, i + 1 < numLayers ? `layers.${i + 1}.input_norm` : 'final_norm');
    x = afterMlp.sum;
    h = afterMlp.normed;
  });
  // Only the last position's hidden state goes through the head when that is all the caller reads: the
  // addon's Linear takes it itself (so the final norm folds into the head), otherwise a Slice first.
  const lastInHead = lastOnly && g.addonLinear && weights.lmHeadQuantized === undefined && foldsAll();
  if (lastOnly && !lastInHead) h = lastPosition(g, h);
  if (weights.lmHeadQuantized !== undefined) {
    // A quantized head keeps h's leading axes ([batch, seq or 1, vocab] out) and the embeddings' lookup stays float.
    return { logits: matMul(g, h, quantizedWeight(g, 'lm_head', weights.lmHeadQuantized)), present };
  }
  const head = weights.lmHead === undefined ? embedTokens : g.weight('lm_head.weight', weights.lmHead);
  // Linear takes the head's [vocab, hidden] as it is, and keeps h's leading axes.
  // A rank's logits of its vocabulary shard are gathered first; soft-capping is the same before or after
  // (`inHead`: the head's Linear capped them).
  const cap = (logits: string, inHead = false): string => {
    const whole = tp === undefined ? logits : gatheredLogits(g, tp, logits);
    return spec.finalSoftcap === undefined || inHead ? whole : capped(g, whole, spec.finalSoftcap);
  };
  if (g.addonLinear) {
    // Where the slot decoder asks for it, a head that takes the last position itself takes each row's
    // own instead (`last_index`): a ragged prefill's rows, padded to one width, then need no second run
    // of their last tokens.
    const lastIndex = lastInHead && slotLengths?.lastIndex === true ? g.input('last_index', 'int32', ['batch_size']) : undefined;
    // The final soft cap goes into the head's epilogue (CHORUS_FOLD_SOFTCAP=0: three operators after it).
    const softcap = process.env.CHORUS_FOLD_SOFTCAP === '0' ? undefined : spec.finalSoftcap;
    const logits = addonLinear(g, h, head, undefined, { transposed: true, last: lastInHead, lastIndex, ...(softcap === undefined ? {} : { softcap }) });
    return { logits: cap(logits, softcap !== undefined), present };
  }
  // The head as Gemm with transB, so a tied head reads the embedding initializer instead of a copy.
  const flat = g.op('Reshape', [h, g.int64([-1, spec.hiddenSize])]);
  const logits2d = g.op('Gemm', [flat, head], { transB: 1 }, { name: 'lm_head' });
  // The last position's [batch, vocab] only needs an axis back; no shape arithmetic, which ONNX Runtime
  // would place on the CPU (and which would keep the slot decoder out of CUDA graphs).
  if (lastOnly) return { logits: cap(g.op('Unsqueeze', [logits2d, g.int64([1])])), present };
  if (tp !== undefined) throw new ChorusError('CHORUS_INTERNAL', 'a tensor-parallel decoder computes the last position\'s logits only');
  const outShape = g.op('Concat', [g.op('Slice', [g.op('Shape', [inputIds]), g.int64([0]), g.int64([2])]), g.int64([vocabSize])], { axis: 0 });
  return { logits: g.op('Reshape', [cap(logits2d), outShape]), present };
}

/**
 * The additive attention bias: 0 where a query may attend (the key is not padding and not in its
 * future), the minimum elsewhere. Query i sits at absolute position past + i, where past = total - seq.
 * Portable: [batch, 1, 1, seq, total] in float32 whatever the build's type (in float16 the minimum plus
 * a score overflows to -inf, and a row with nothing to attend, a padding query, would become NaN).
 * cuda: [batch, 1, seq, total] in the activations' type, as the contrib attention operators take it.
 */
function attentionBias(g: GraphBuilder, inputIds: string, attentionMask: string, flavor: Flavor, window?: number): string {
  const seq = g.op('Slice', [g.op('Shape', [inputIds]), g.int64([1]), g.int64([2])]);
  const total = g.op('Slice', [g.op('Shape', [attentionMask]), g.int64([1]), g.int64([2])]);
  const pastLength = g.op('Squeeze', [g.op('Sub', [total, seq])]);
  const totalScalar = g.op('Squeeze', [total]);
  const zero = g.int64([0], []);
  const one = g.int64([1], []);
  const keyPositions = g.op('Range', [zero, totalScalar, one]);
  const queryPositions = g.op('Range', [pastLength, totalScalar, one]);
  const keys = g.op('Unsqueeze', [keyPositions, g.int64([0])]);
  const queries = g.op('Unsqueeze', [queryPositions, g.int64([1])]);
  let causal = g.op('LessOrEqual', [keys, queries]);
  // A sliding window: query i attends key j when i - j < window.
  if (window !== undefined) causal = g.op('And', [causal, g.op('Less', [g.op('Sub', [queries, keys]), g.int64([window], [])])]);
  const notPadding = g.op('Unsqueeze', [g.op('Cast', [attentionMask], { to: 9 }), g.int64([1, 2, 3])]);
  const allowed = g.op('And', [causal, notPadding]);
  const name = window === undefined ? 'attention_bias' : 'window_bias';
  if (flavor === 'cuda') {
    const min = g.floatType === 'float16' ? FLOAT16_MIN : g.floatType === 'bfloat16' ? BFLOAT16_MIN : FLOAT32_MIN;
    const bias = g.op('Where', [allowed, g.floatConstant([0], []), g.floatConstant([min], [])], {}, { name });
    return g.op('Squeeze', [bias, g.int64([1])]);
  }
  return additiveMask(g, allowed, name);
}

/**
 * GroupQueryAttention's seqlens_k (the index of each row's last key) and total_sequence_length. Every
 * row counts as full (padding is masked by the bias instead), so its cache layout is the portable one.
 */
function cacheLengths(g: GraphBuilder, inputIds: string, attentionMask: string): { seqlensK: string; total: string } {
  const total = g.op('Cast', [g.op('Squeeze', [g.op('Slice', [g.op('Shape', [attentionMask]), g.int64([1]), g.int64([2])])])], { to: 6 });
  const batch = g.op('Slice', [g.op('Shape', [inputIds]), g.int64([0]), g.int64([1])]);
  const seqlensK = g.op('Expand', [g.op('Sub', [total, g.constantOf('int32', [1], [])]), batch]);
  return { seqlensK, total };
}

/**
 * cos and sin of position * inverse frequency, [batch, 1, seq, head_dim], halves repeated (Hugging Face's
 * rotate-half layout). Computed in float32 from float32 inverse frequencies (scaled as the spec says,
 * Llama 3's included), as transformers does.
 */
function rotary(g: GraphBuilder, positionIds: string, spec: DecoderSpec, flavor: Flavor): Rotary {
  const headDim = spec.headDim;
  const invFreq = inverseFrequencies(spec);
  if (flavor === 'cuda') {
    // RotaryEmbedding looks cos and sin up by position in [max_positions, head_dim / 2] caches.
    const cos = new Float32Array(spec.maxPositions * (headDim / 2));
    const sin = new Float32Array(cos.length);
    for (let p = 0; p < spec.maxPositions; p++) {
      for (let i = 0; i < headDim / 2; i++) {
        const angle = Math.fround(p * invFreq[i]!);
        cos[p * (headDim / 2) + i] = Math.cos(angle);
        sin[p * (headDim / 2) + i] = Math.sin(angle);
      }
    }
    const dims = [spec.maxPositions, headDim / 2];
    return { kind: 'caches', cos: g.weight('rope.cos_cache', { dims, data: cos }), sin: g.weight('rope.sin_cache', { dims, data: sin }) };
  }
  const positions = g.op('Unsqueeze', [g.op('Cast', [positionIds], { to: 1 }), g.int64([2])]);
  const freqs = g.op('Mul', [positions, g.floatConstant(invFreq, [headDim / 2], 'float32')]);
  const angles = g.op('Unsqueeze', [g.op('Concat', [freqs, freqs], { axis: -1 }), g.int64([1])]);
  const cast = (value: string): string => (g.half ? g.toFloatType(value) : value);
  return { kind: 'tables', cos: cast(g.op('Cos', [angles], {}, { name: 'rope_cos' })), sin: cast(g.op('Sin', [angles], {}, { name: 'rope_sin' })) };
}

function rotate(g: GraphBuilder, x: string, tables: Rotary, headDim: number): string {
  const half = headDim / 2;
  const first = g.op('Slice', [x, g.int64([0]), g.int64([half]), g.int64([3])]);
  const second = g.op('Slice', [x, g.int64([half]), g.int64([headDim]), g.int64([3])]);
  const rotated = g.op('Concat', [g.op('Neg', [second]), first], { axis: 3 });
  return g.op('Add', [g.op('Mul', [x, tables.cos]), g.op('Mul', [rotated, tables.sin])]);
}

/** Self-attention of one block on the normed input `h`: the projected output and the grown cache. */
function attend(
  g: GraphBuilder,
  c: GraphContext,
  w: DecoderLayerWeights,
  index: number,
  h: string,
  past: { key: string; value: string },
): { output: Projected; presentKey: string; presentValue: string } {
  const { numHeads, numKvHeads, headDim } = c.spec;
  const name = `layers.${index}`;
  const scaleValue = c.spec.attnScale ?? 1 / Math.sqrt(headDim);
  const scale = float(scaleValue);
  const window = windowOf(c.spec, index);
  const bias = window > 0 && c.windowBias !== undefined ? c.windowBias : c.bias;
  // The addon's operators' sliding_window and softcap, given only to the models that have them (absent: none).
  const addonExtras = { ...(window > 0 ? { sliding_window: window } : {}), ...(c.spec.attnSoftcap === undefined ? {} : { softcap: float(c.spec.attnSoftcap) }) };
  // GroupQueryAttention's: its local_window_size (-1: none) is the number of keys a query attends, its
  // own included, as Hugging Face's sliding_window (ONNX Runtime 1.29). Where a bias is given, the
  // window is in the bias.
  const gqaExtras = { ...(window > 0 && bias === '' ? { local_window_size: window } : {}), ...(c.spec.attnSoftcap === undefined ? {} : { softcap: float(c.spec.attnSoftcap) }) };
  if (c.flavor === 'cuda') {
    // One projection for q, k and v (which also leaves ONNX Runtime nothing to pack into GroupQueryAttention itself).
    const packed = packedQkv(g, w, name);
    const project = (output: string): Projected => (c.tp === undefined ? projectBiasAfter(g, w.o, output, `${name}.o`) : rowParallel(g, c.tp, w.o, output, `${name}.o`));
    if (c.slotAttention === 'paged' || slotRotaryInAddon(g, c)) {
      // The addon's operator: the bias added, q and k normed (Qwen3) and rotated, the new keys written
      // into the row's blocks (the slot decoder: its slot, with no block table) and attended.
      const projected = g.addonLinear ? addonLinear(g, h, packed.weight, undefined) : matMul(g, h, packed.weight);
      const norms = w.qNorm === undefined ? [] : [g.weight(`${name}.q_norm.weight`, w.qNorm.weight), g.weight(`${name}.k_norm.weight`, required(w.kNorm, `layer ${index} k norm`).weight)];
      const optional = [c.cacheLengths!.blockTable ?? '', ...(c.rotary === undefined ? ['', ''] : [c.rotary.cos, c.rotary.sin]), packed.bias ?? '', ...norms];
      while (optional.at(-1) === '') optional.pop();
      const [output, presentKey, presentValue] = g.opMany(
        'PagedAttention',
        [projected, past.key, past.value, c.cacheLengths!.seqlensK, ...optional],
        { num_heads: numHeads, kv_num_heads: numKvHeads, scale, ...addonExtras, ...(norms.length === 0 ? {} : { epsilon: float(c.spec.normEps) }) },
        { domain: 'chorus', outputs: 3 },
      );
      return { output: project(output!), presentKey: presentKey!, presentValue: presentValue! };
    }
    if (c.fused && c.rotary === undefined && (c.slotAttention === 'addon' || c.slotAttention === 'PagedAttention')) {
      // The addon's operator: the bias added, the new keys written and attended in one kernel a step.
      const qkv = g.addonLinear ? addonLinear(g, h, packed.weight, undefined) : matMul(g, h, packed.weight);
      const [output, presentKey, presentValue] = g.opMany(
        'DecoderSlotAttention',
        [qkv, past.key, past.value, c.cacheLengths!.seqlensK, ...(packed.bias === undefined ? [] : [packed.bias])],
        { num_heads: numHeads, kv_num_heads: numKvHeads, scale, ...addonExtras },
        { domain: 'chorus', outputs: 3 },
      );
      return { output: project(output!), presentKey: presentKey!, presentValue: presentValue! };
    }
    const projected = affine(g, h, packed.weight, packed.bias, (numHeads + 2 * numKvHeads) * headDim);
    if (c.fused) {
      // GroupQueryAttention rotates q and k itself: normed in the packed projection before it.
      const qkv = normPackedQk(g, c, w, projected, name);
      const rotary = c.rotary === undefined ? [] : [c.rotary.cos, c.rotary.sin];
      const [output, presentKey, presentValue] = g.opMany(
        'GroupQueryAttention',
        [qkv, '', '', past.key, past.value, c.cacheLengths!.seqlensK, c.cacheLengths!.total, ...rotary],
        { num_heads: numHeads, kv_num_heads: numKvHeads, scale, ...gqaExtras, ...(c.rotary === undefined ? {} : { do_rotary: 1, rotary_interleaved: 0 }) },
        { domain: MS, outputs: 3 },
      );
      return { output: project(output!), presentKey: presentKey!, presentValue: presentValue! };
    }
    const [query, key, v] = g.opMany('Split', [projected, g.int64([numHeads * headDim, numKvHeads * headDim, numKvHeads * headDim])], { axis: -1 }, { outputs: 3 }) as [string, string, string];
    let [q, k] = w.qNorm === undefined ? [query, key] : [normHeads(g, c, w.qNorm, query, numHeads, `${name}.q_norm`), normHeads(g, c, required(w.kNorm, `layer ${index} k norm`), key, numKvHeads, `${name}.k_norm`)];
    if (c.rotary !== undefined) {
      const rope = (x: string, heads: number): string =>
        g.op('RotaryEmbedding', [x, c.positionIds, c.rotary!.cos, c.rotary!.sin], { interleaved: 0, num_heads: heads }, { domain: MS });
      q = rope(q, numHeads);
      k = rope(k, numKvHeads);
    }
    const [output, presentKey, presentValue] =
      c.cacheLengths === undefined
        ? g.opMany('MultiHeadAttention', [q, k, v, '', '', bias, past.key, past.value], { num_heads: numHeads, scale }, { domain: MS, outputs: 3 })
        : g.opMany(
            'GroupQueryAttention',
            [q, k, v, past.key, past.value, c.cacheLengths.seqlensK, c.cacheLengths.total, ...(bias === '' ? [] : ['', '', '', bias])],
            { num_heads: numHeads, kv_num_heads: numKvHeads, scale, ...gqaExtras },
            { domain: MS, outputs: 3 },
          );
    return { output: project(output!), presentKey: presentKey!, presentValue: presentValue! };
  }
  const q = linear(g, w.q, h, `${name}.q`);
  const k = linear(g, w.k, h, `${name}.k`);
  const v = linear(g, w.v, h, `${name}.v`);
  const heads = (value: string, count: number): string =>
    g.op('Transpose', [g.op('Reshape', [value, g.int64([0, 0, count, headDim])])], { perm: [0, 2, 1, 3] });
  let q4 = heads(q, numHeads);
  let k4 = heads(k, numKvHeads);
  const v4 = heads(v, numKvHeads);
  if (w.qNorm !== undefined) {
    q4 = norm(g, c.spec, w.qNorm, q4, `${name}.q_norm`);
    k4 = norm(g, c.spec, required(w.kNorm, `layer ${index} k norm`), k4, `${name}.k_norm`);
  }
  if (c.rotary?.kind === 'tables') {
    q4 = rotate(g, q4, c.rotary, headDim);
    k4 = rotate(g, k4, c.rotary, headDim);
  }
  const presentKey = g.op('Concat', [past.key, k4], { axis: 2 });
  const presentValue = g.op('Concat', [past.value, v4], { axis: 2 });
  // Grouped-query attention by broadcasting: queries [b, kv, rep, s, d] against keys [b, kv, 1, t, d].
  const groups = numHeads / numKvHeads;
  const q5 = g.op('Reshape', [q4, g.int64([0, numKvHeads, groups, -1, headDim])]);
  const k5 = g.op('Unsqueeze', [presentKey, g.int64([2])]);
  const v5 = g.op('Unsqueeze', [presentValue, g.int64([2])]);
  const scores = g.op('MatMul', [q5, g.op('Transpose', [k5], { perm: [0, 1, 2, 4, 3] })]);
  const probs = maskedSoftmax(g, scores, scaleValue, bias, c.spec.attnSoftcap);
  const context = g.op('MatMul', [probs, v5]);
  const merged = g.op('Reshape', [g.op('Transpose', [g.op('Reshape', [context, g.int64([0, numHeads, -1, headDim])])], { perm: [0, 2, 1, 3] }), g.int64([0, 0, numHeads * headDim])]);
  return { output: { value: linear(g, w.o, merged, `${name}.o`) }, presentKey, presentValue };
}

/**
 * Whether a rotary slot decoder takes the addon's PagedAttention over its slots (one block a row, no
 * block table) rather than ONNX Runtime's GroupQueryAttention, in fp16 and bf16 (CUDA's types), for
 * heads the operator's kernels take (a multiple of 8 dimensions, up to 256). By default (`addon`): for
 * models with q and k norms (Qwen3), which GroupQueryAttention cannot take, and for heads of 64, 96, 128
 * or 256 in groups of up to 16 query heads, which its tensor-core kernel takes at many rows. Measured on
 * an H100, fp16, prompt 128, 128 new tokens, against GroupQueryAttention in the same run: TinyLlama-1.1B
 * 969 / 32,032 tokens/s at batch 1 / 64 against 876 / 30,580, Llama-3.2-1B 939 / 31,005 against 873 /
 * 29,566, Llama-2-7B 209 / 6,304 against 196 / 5,961; Gemma-2-2B in bf16 421 / 12,820 against 344 /
 * 12,763. `PagedAttention` sends every rotary model to the addon; fp32 (which the CPU runs) keeps
 * GroupQueryAttention always.
 */
function slotRotaryInAddon(g: GraphBuilder, c: GraphContext): boolean {
  return c.rotary !== undefined && c.tp === undefined && rotarySlotAttentionInAddon(c.spec, g.floatType, c.slotAttention);
}

/** Heads PagedAttention's tensor-core kernel takes (src/native/paged-attention.cu MmaKernelTakes). */
const TENSOR_CORE_HEAD_DIMS = [64, 96, 128, 256];
const TENSOR_CORE_MOST_GROUP = 16;

/** slotRotaryInAddon's choice for a rotary model of `spec` on one GPU (exported for its tests). */
export function rotarySlotAttentionInAddon(spec: DecoderSpec, floatType: FloatType, attention: SlotAttentionKind): boolean {
  const tensorCores = TENSOR_CORE_HEAD_DIMS.includes(spec.headDim) && spec.numHeads / spec.numKvHeads <= TENSOR_CORE_MOST_GROUP;
  const wanted = attention === 'PagedAttention' || (attention === 'addon' && (spec.qkNorm === true || tensorCores));
  return wanted && floatType !== 'float32' && spec.headDim % 8 === 0 && spec.headDim <= 256;
}

/** Qwen3's RMSNorm of each head of `x` [batch, seq, heads * head_dim], over head_dim. */
function normHeads(g: GraphBuilder, c: GraphContext, w: Norm, x: string, heads: number, name: string): string {
  const { headDim } = c.spec;
  const perHead = g.op('Reshape', [x, g.int64([0, 0, heads, headDim])]);
  // The cuda flavor takes it as ONNX Runtime's one kernel (float32 inside, rounded once), not seven.
  const normed =
    c.flavor === 'cuda'
      ? g.op('SimplifiedLayerNormalization', [perHead, g.weight(`${name}.weight`, w.weight)], { axis: -1, epsilon: float(c.spec.normEps), stash_type: 1 })
      : norm(g, c.spec, w, perHead, name);
  return g.op('Reshape', [normed, g.int64([0, 0, heads * headDim])]);
}

/** A packed [batch, seq, (heads + 2 kv_heads) * head_dim] projection with q and k normed per head (as it was without q/k norms). */
function normPackedQk(g: GraphBuilder, c: GraphContext, w: DecoderLayerWeights, qkv: string, name: string): string {
  if (w.qNorm === undefined) return qkv;
  const { numHeads, numKvHeads, headDim } = c.spec;
  const [q, k, v] = g.opMany('Split', [qkv, g.int64([numHeads * headDim, numKvHeads * headDim, numKvHeads * headDim])], { axis: -1 }, { outputs: 3 }) as [string, string, string];
  const normedK = normHeads(g, c, required(w.kNorm, `${name} k norm`), k, numKvHeads, `${name}.k_norm`);
  return g.op('Concat', [normHeads(g, c, w.qNorm, q, numHeads, `${name}.q_norm`), normedK, v], { axis: -1 });
}

/** A gated MLP's gate projection of `m` and its activation, apart from the up projection. */
function activatedGate(g: GraphBuilder, c: GraphContext, gate: Linear, m: string, name: string, activation: 'silu' | 'gelu_tanh'): string {
  if (g.addonLinear) return linearWith(g, gate, m, `${name}.gate`, activation);
  const projected = linear(g, gate, m, `${name}.gate`);
  if (activation === 'silu') return silu(g, projected);
  return c.flavor === 'cuda' ? g.op('FastGelu', [projected], {}, { domain: MS }) : geluPytorchTanh(g, projected);
}

/** The MLP of one block on the normed input `m`. */
function mlp(g: GraphBuilder, c: GraphContext, w: DecoderLayerWeights, index: number, m: string): Projected {
  const name = `layers.${index}`;
  let inner: string;
  if (c.spec.mlp === 'silu_gated' || c.spec.mlp === 'gelu_tanh_gated') {
    const activation = c.spec.mlp === 'silu_gated' ? 'silu' : 'gelu_tanh';
    const gateWeights = required(w.gate, `layer ${index} gate projection`);
    // Through Linear, the gate's projection, its activation, the up projection and their product are
    // one operator; through QuantLinear too where the two are quantized alike; otherwise the gate and up
    // projections apart and a Mul.
    if (g.addonLinear && plainWeights(gateWeights) && plainWeights(w.up)) {
      inner = gatedLinear(g, gateWeights, w.up, m, name, activation);
    } else {
      inner = quantizedGatedLinear(g, gateWeights, w.up, m, name, activation) ?? g.op('Mul', [activatedGate(g, c, gateWeights, m, name, activation), linear(g, w.up, m, `${name}.up`)]);
    }
  } else if (g.addonLinear) {
    inner = linearWith(g, w.up, m, `${name}.up`, 'gelu_tanh');
  } else if (c.flavor === 'cuda') {
    const { weight, bias } = linearWeights(g, w.up, `${name}.up`);
    inner = g.op('FastGelu', [matMul(g, m, weight), ...(bias === undefined ? [] : [bias])], {}, { domain: MS });
  } else {
    inner = geluTanh(g, linear(g, w.up, m, `${name}.up`));
  }
  return c.tp === undefined ? projectBiasAfter(g, w.down, inner, `${name}.down`) : rowParallel(g, c.tp, w.down, inner, `${name}.down`);
}

/** Layer `index`'s attention window (0: global). */
function windowOf(spec: DecoderSpec, index: number): number {
  const window = spec.slidingWindow;
  return window === undefined || window.layers?.[index] === false ? 0 : window.size;
}

/**
 * A sublayer's output normed before it joins the residual stream (Gemma 2's post-attention and
 * post-feedforward norms), or `delta` as it is where the layer has no such norm.
 */
function outputNorm(g: GraphBuilder, c: GraphContext, w: Norm | undefined, delta: Projected, name: string): Projected {
  if (w === undefined) return delta;
  const value = withBias(g, delta);
  if (c.flavor === 'cuda' && c.spec.norm === 'rmsnorm') {
    return { value: g.op('SimplifiedLayerNormalization', [value, g.weight(`${name}.weight`, w.weight)], { axis: -1, epsilon: float(c.spec.normEps), stash_type: 1 }) };
  }
  return { value: norm(g, c.spec, w, value, name) };
}

/** `sum = x + delta` and the norm of it: Add then norm (portable), or one fused Skip*Normalization (cuda). */
function residualNorm(g: GraphBuilder, c: GraphContext, w: Norm, x: string, delta: Projected, name: string): { normed: string; sum: string } {
  if (c.flavor === 'cuda') {
    const [normed, sum] = skipNorm(g, c.spec, w, x, delta, name);
    return { normed, sum };
  }
  const sum = g.op('Add', [x, withBias(g, delta)]);
  return { normed: norm(g, c.spec, w, sum, name), sum };
}
