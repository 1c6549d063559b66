/**
 * Encoder-decoder graphs in the Optimum / transformers.js layout.
 * - `onnx/encoder_model.onnx`: input_ids, attention_mask -> last_hidden_state.
 * - `onnx/decoder_model_merged.onnx`: encoder_attention_mask, input_ids, encoder_hidden_states,
 *   past_key_values.{i}.decoder|encoder.key|value, use_cache_branch -> logits,
 *   present.{i}.decoder|encoder.key|value. The self-attention cache grows by the new tokens; the
 *   cross-attention keys and values are computed from encoder_hidden_states when use_cache_branch is
 *   false (the first step) and passed through from the past after, in an If node.
 * In float16 the projections add their biases after the product (PyTorch adds them inside): the
 * padded projection that reproduces that cost 10-35% per step on bart-large in an A/B run, and these
 * models already met transformers' fp16 greedy tokens without it.
 */
import type { FloatType } from './float-bits.ts';
import { type Dim, float, GraphBuilder } from './graph.ts';
import {
  additiveMask,
  addonLinear,
  affine,
  defaultSlotLinear,
  geluErf,
  geluTanh,
  linear,
  linearWith,
  maskedSoftmax,
  MS,
  norm,
  packedQkv,
  type Projected,
  projectBiasAfter,
  required,
  silu,
  skipNorm,
  type SlotLinear,
  withBias,
} from './layers.ts';
import { relativeBucketTable } from './relative-position.ts';
import type { AttentionWeights, DecoderLayer, FeedForwardWeights, Seq2SeqSpec, Seq2SeqWeights, StackWeights } from './seq2seq-spec.ts';
import type { Norm } from './decoder-spec.ts';
import type { Tensor } from './tensor.ts';

/** The encoder graph; with `outputAttentions`, each layer's attention probabilities are outputs too. */
export function buildEncoderGraph(spec: Seq2SeqSpec, weights: Seq2SeqWeights, floatType: FloatType, outputAttentions = false): GraphBuilder {
  const g = new GraphBuilder(floatType, { pytorchRounding: false });
  const x = encoderStack(g, spec, weights, outputAttentions);
  g.output('last_hidden_state', x, floatType, ['batch_size', 'encoder_sequence_length', spec.dModel]);
  return g;
}

/** The encoder's inputs (input_ids, attention_mask) and layers: its last hidden state. */
function encoderStack(g: GraphBuilder, spec: Seq2SeqSpec, weights: Seq2SeqWeights, outputAttentions: boolean, fused = false): string {
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 'encoder_sequence_length']);
  const attentionMask = g.input('attention_mask', 'int64', ['batch_size', 'encoder_sequence_length']);
  const length = g.op('Squeeze', [g.op('Slice', [g.op('Shape', [inputIds]), g.int64([1]), g.int64([2])])]);
  const positions = g.op('Range', [g.int64([0], []), length, g.int64([1], [])]);
  const stack = weights.encoder;
  let x = embed(g, spec, weights, stack, inputIds, positions, 'encoder');
  // The padding in the form the attention takes: MultiHeadAttention's lengths, or an additive bias
  // (with T5's relative position bias added in).
  let padding: string;
  if (fused) {
    padding = paddingLengths(g, attentionMask);
  } else {
    padding = paddingBias(g, attentionMask);
    if (spec.positions.kind === 'relative') {
      padding = g.op('Add', [relativeBias(g, spec.positions, required(stack.relativeBias, 'encoder relative bias'), positions, positions, true, 'encoder'), padding]);
    }
  }
  stack.layers.forEach((layer, i) => {
    const name = `encoder.layers.${i}`;
    x = sublayer(g, spec, layer.selfNorm, x, `${name}.self_norm`, (h) => {
      if (fused) return fusedAttention(g, spec, layer.self, h, padding, `${name}.self`);
      const [k, v] = [heads(g, spec, linear(g, layer.self.k, h, `${name}.self.k`)), heads(g, spec, linear(g, layer.self.v, h, `${name}.self.v`))];
      const { output, probs } = attention(g, spec, layer.self, h, k, v, padding, `${name}.self`);
      if (outputAttentions) g.output(`attentions.${i}`, probs, g.floatType, ['batch_size', spec.numHeads, 'encoder_sequence_length', 'encoder_sequence_length']);
      return output;
    });
    x = sublayer(g, spec, layer.ffnNorm, x, `${name}.ffn_norm`, (h) => feedForward(g, spec, layer.ffn, h, `${name}.ffn`));
  });
  if (spec.finalNorm) x = norm(g, spec, required(stack.finalNorm, 'encoder final norm'), x, 'encoder.final_norm');
  return x;
}

/**
 * The native engine's encoder (onnx/encoder_model_slots.onnx): input_ids and attention_mask [batch,
 * source] in, and straight out every decoder layer's cross-attention keys and values, `cross.{i}.key|value`
 * [batch, source, heads * head_dim] (position-major: the engine copies each row into its slot whole).
 */
export function buildSeq2SeqSlotEncoderGraph(
  spec: Seq2SeqSpec,
  weights: Seq2SeqWeights,
  floatType: FloatType,
  projections: SlotLinear = defaultSlotLinear(floatType),
  selfAttention: EncoderAttention = defaultEncoderAttention(spec, floatType),
): GraphBuilder {
  if (selfAttention === 'MultiHeadAttention' && spec.positions.kind === 'relative') throw new Error('encoderAttention: MultiHeadAttention takes no relative position bias (T5); use MatMul');
  const g = new GraphBuilder(floatType, { pytorchRounding: false, addonLinear: projections === 'addon' });
  const x = encoderStack(g, spec, weights, false, selfAttention === 'MultiHeadAttention');
  const width = spec.numHeads * spec.headDim;
  weights.decoder.layers.forEach((layer, i) => {
    g.output(`cross.${i}.key`, linear(g, layer.cross.k, x, `decoder.layers.${i}.cross.k`), floatType, ['batch_size', 'encoder_sequence_length', width]);
    g.output(`cross.${i}.value`, linear(g, layer.cross.v, x, `decoder.layers.${i}.cross.v`), floatType, ['batch_size', 'encoder_sequence_length', width]);
  });
  return g;
}

/**
 * The native engine's decoder (onnx/decoder_model_slots.onnx): one token per row over caches of slots
 * that stay on the device. In: `input_ids` int64 [batch, 1], `lengths` int32 [batch] (each row's
 * tokens before this one, its position), `encoder_lengths` int32 [batch] (each row's source tokens),
 * `past_key_values.{i}.decoder.key|value` [batch, max_length, heads * head_dim] and
 * `past_key_values.{i}.encoder.key|value` [batch, max_source_length, heads * head_dim]. Out: `logits`
 * [batch, 1, vocab] and `present.{i}.decoder.key|value`, the self-attention caches, which SlotAttention
 * (operator domain `chorus`, the native addon's) writes in place when bound to the past's buffers.
 * T5's relative position bias goes in as one [heads, max_distance + 1] table by distance (the bucket
 * stops changing there), folded from the weights when the session loads.
 */
export function buildSeq2SeqSlotDecoderGraph(spec: Seq2SeqSpec, weights: Seq2SeqWeights, floatType: FloatType, projections: SlotLinear = defaultSlotLinear(floatType)): GraphBuilder {
  const g = new GraphBuilder(floatType, { pytorchRounding: false, addonLinear: projections === 'addon' });
  const width = spec.numHeads * spec.headDim;
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 1]);
  const lengths = g.input('lengths', 'int32', ['batch_size']);
  const encoderLengths = g.input('encoder_lengths', 'int32', ['batch_size']);
  const stack = weights.decoder;
  const past = stack.layers.map((_, i) => ({
    key: g.input(`past_key_values.${i}.decoder.key`, floatType, ['batch_size', 'max_length', width]),
    value: g.input(`past_key_values.${i}.decoder.value`, floatType, ['batch_size', 'max_length', width]),
    crossKey: g.input(`past_key_values.${i}.encoder.key`, floatType, ['batch_size', 'max_source_length', width]),
    crossValue: g.input(`past_key_values.${i}.encoder.value`, floatType, ['batch_size', 'max_source_length', width]),
  }));
  const positions = g.op('Unsqueeze', [g.op('Cast', [lengths], { to: 7 }), g.int64([1])]);
  let x = embed(g, spec, weights, stack, inputIds, positions, 'decoder');
  let bias = '';
  if (spec.positions.kind === 'relative') {
    const { numBuckets, maxDistance } = spec.positions;
    const table = relativeBucketTable(false, numBuckets, maxDistance);
    // Distance d = query - key position is relative position -d, entry maxDistance - d of the table.
    const buckets = Array.from({ length: maxDistance + 1 }, (_, d) => table[maxDistance - d]!);
    const values = g.op('Gather', [g.weight('decoder.relative_bias.weight', required(stack.relativeBias, 'decoder relative bias')), g.int64(buckets)], { axis: 0 });
    bias = g.op('Transpose', [values], { perm: [1, 0] });
    if (floatType !== 'float32') bias = g.op('Cast', [bias], { to: 1 });
  }
  const slotAttention = (inputs: string[], outputs: number, name: string, packed = false): string[] =>
    g.opMany('SlotAttention', inputs, { num_heads: spec.numHeads, scale: float(spec.attentionScale), ...(packed ? { qkv_packed: 1 } : {}) }, { domain: 'chorus', outputs, name });
  const selfAttention = (layer: DecoderLayer, i: number, h: string): Projected => {
    const name = `decoder.layers.${i}`;
    let attended: string[];
    if (g.addonLinear) {
      // One projection into the attention, which adds the biases and splits q, k and v itself.
      const packed = packedQkv(g, layer.self, `${name}.self`);
      const qkvBias = packed.bias === undefined ? [] : [packed.bias];
      attended = slotAttention([addonLinear(g, h, packed.weight, undefined), '', '', past[i]!.key, past[i]!.value, lengths, bias, ...qkvBias], 3, `${name}.self.attention`, true);
    } else {
      const [q, k, v] = projectQkv(g, layer.self, h, width, `${name}.self`) as [string, string, string];
      attended = slotAttention([q, k, v, past[i]!.key, past[i]!.value, lengths, bias], 3, `${name}.self.attention`);
    }
    const [output, key, value] = attended;
    g.output(`present.${i}.decoder.key`, key!, floatType, ['batch_size', 'max_length', width]);
    g.output(`present.${i}.decoder.value`, value!, floatType, ['batch_size', 'max_length', width]);
    return projectBiasAfter(g, layer.self.o, output!, `${name}.self.o`);
  };
  const crossAttention = (layer: DecoderLayer, i: number, h: string): Projected => {
    const name = `decoder.layers.${i}`;
    // Through Linear the query's bias is added by the attention.
    const q = projectBiasAfter(g, layer.cross.q, h, `${name}.cross.q`);
    const [output] = slotAttention([q.value, '', '', past[i]!.crossKey, past[i]!.crossValue, encoderLengths, ...(q.bias === undefined ? [] : ['', q.bias])], 1, `${name}.cross.attention`);
    return projectBiasAfter(g, layer.cross.o, output!, `${name}.cross.o`);
  };
  const ffn = (layer: DecoderLayer, i: number, h: string): Projected => slotFeedForward(g, spec, layer.ffn, h, `decoder.layers.${i}.ffn`);
  const sublayers: Array<[(layer: DecoderLayer) => Norm, (layer: DecoderLayer, i: number, h: string) => Projected]> = [
    [(layer) => layer.selfNorm, selfAttention],
    [(layer) => layer.crossNorm, crossAttention],
    [(layer) => layer.ffnNorm, ffn],
  ];
  // The residual stream through ONNX Runtime's fused Skip(Simplified)LayerNormalization: each add and
  // the norm after it in one operator.
  const layers = stack.layers;
  if (spec.preNorm) {
    // x + f(norm(x)): each sublayer's norm is fused with the add before it.
    let h = norm(g, spec, layers[0]!.selfNorm, x, 'decoder.layers.0.self_norm');
    layers.forEach((layer, i) => {
      sublayers.forEach(([, f], j) => {
        const delta = f(layer, i, h);
        const nextNorm = j < 2 ? sublayers[j + 1]![0](layer) : i + 1 < layers.length ? layers[i + 1]!.selfNorm : spec.finalNorm ? required(stack.finalNorm, 'decoder final norm') : undefined;
        if (nextNorm === undefined) {
          h = g.op('Add', [x, withBias(g, delta)]);
          return;
        }
        const names = ['cross_norm', 'ffn_norm'];
        const normName = j < 2 ? `decoder.layers.${i}.${names[j]!}` : i + 1 < layers.length ? `decoder.layers.${i + 1}.self_norm` : 'decoder.final_norm';
        [h, x] = skipNorm(g, spec, nextNorm, x, delta, normName);
      });
    });
    x = h;
  } else {
    // norm(x + f(x)).
    layers.forEach((layer, i) => {
      const names = ['self_norm', 'cross_norm', 'ffn_norm'];
      sublayers.forEach(([normOf, f], j) => {
        x = skipNorm(g, spec, normOf(layer), x, f(layer, i, x), `decoder.layers.${i}.${names[j]!}`)[0];
      });
    });
    if (spec.finalNorm) x = norm(g, spec, required(stack.finalNorm, 'decoder final norm'), x, 'decoder.final_norm');
  }
  g.output('logits', lmHead(g, spec, weights, x, inputIds, false), floatType, ['batch_size', 1, spec.vocabSize]);
  return g;
}

/** The merged decoder graph. */
export function buildSeq2SeqDecoderGraph(spec: Seq2SeqSpec, weights: Seq2SeqWeights, floatType: FloatType): GraphBuilder {
  const g = new GraphBuilder(floatType, { pytorchRounding: false });
  const { numHeads, headDim, dModel, vocabSize } = spec;
  const encoderMask = g.input('encoder_attention_mask', 'int64', ['batch_size', 'encoder_sequence_length']);
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 'decoder_sequence_length']);
  const encoderHidden = g.input('encoder_hidden_states', floatType, ['batch_size', 'encoder_sequence_length', dModel]);
  const past = weights.decoder.layers.map((_, i) => ({
    key: g.input(`past_key_values.${i}.decoder.key`, floatType, ['batch_size', numHeads, 'past_decoder_sequence_length', headDim]),
    value: g.input(`past_key_values.${i}.decoder.value`, floatType, ['batch_size', numHeads, 'past_decoder_sequence_length', headDim]),
    crossKey: g.input(`past_key_values.${i}.encoder.key`, floatType, ['batch_size', numHeads, 'encoder_sequence_length_out', headDim]),
    crossValue: g.input(`past_key_values.${i}.encoder.value`, floatType, ['batch_size', numHeads, 'encoder_sequence_length_out', headDim]),
  }));
  const useCache = g.input('use_cache_branch', 'bool', [1]);

  // Query i of this step sits at absolute position past + i.
  const pastLength = g.op('Squeeze', [g.op('Slice', [g.op('Shape', [past[0]!.key]), g.int64([2]), g.int64([3])])]);
  const seqLength = g.op('Squeeze', [g.op('Slice', [g.op('Shape', [inputIds]), g.int64([1]), g.int64([2])])]);
  const total = g.op('Add', [pastLength, seqLength]);
  const one = g.int64([1], []);
  const queryPositions = g.op('Range', [pastLength, total, one]);
  const keyPositions = g.op('Range', [g.int64([0], []), total, one]);
  const stack = weights.decoder;
  let x = embed(g, spec, weights, stack, inputIds, queryPositions, 'decoder');
  const causal = g.op('LessOrEqual', [g.op('Unsqueeze', [keyPositions, g.int64([0])]), g.op('Unsqueeze', [queryPositions, g.int64([1])])]);
  let selfBias = additiveMask(g, causal);
  if (spec.positions.kind === 'relative') {
    selfBias = g.op('Add', [relativeBias(g, spec.positions, required(stack.relativeBias, 'decoder relative bias'), queryPositions, keyPositions, false, 'decoder'), selfBias]);
  }
  const crossBias = paddingBias(g, encoderMask);

  // Cross-attention keys and values: from the encoder output on the first step, from the past after.
  const crossDims: Dim[] = ['batch_size', numHeads, 'encoder_sequence_length_out', headDim];
  const crossTypes = stack.layers.flatMap(() => [{ type: floatType, dims: crossDims }, { type: floatType, dims: crossDims }]);
  const reuse = g.subgraph('reuse_cross_cache', () => past.flatMap((p) => [p.crossKey, p.crossValue]), crossTypes);
  const compute = g.subgraph(
    'compute_cross_cache',
    () =>
      stack.layers.flatMap((layer, i) => [
        heads(g, spec, linear(g, layer.cross.k, encoderHidden, `decoder.layers.${i}.cross.k`)),
        heads(g, spec, linear(g, layer.cross.v, encoderHidden, `decoder.layers.${i}.cross.v`)),
      ]),
    crossTypes,
  );
  const cross = g.opMany('If', [useCache], { then_branch: reuse, else_branch: compute }, { outputs: 2 * stack.layers.length, name: 'cross_cache' });

  stack.layers.forEach((layer, i) => {
    const name = `decoder.layers.${i}`;
    x = sublayer(g, spec, layer.selfNorm, x, `${name}.self_norm`, (h) => {
      const key = g.op('Concat', [past[i]!.key, heads(g, spec, linear(g, layer.self.k, h, `${name}.self.k`))], { axis: 2 });
      const value = g.op('Concat', [past[i]!.value, heads(g, spec, linear(g, layer.self.v, h, `${name}.self.v`))], { axis: 2 });
      g.output(`present.${i}.decoder.key`, key, floatType, ['batch_size', numHeads, 'total_decoder_sequence_length', headDim]);
      g.output(`present.${i}.decoder.value`, value, floatType, ['batch_size', numHeads, 'total_decoder_sequence_length', headDim]);
      return attention(g, spec, layer.self, h, key, value, selfBias, `${name}.self`).output;
    });
    const [crossKey, crossValue] = [cross[2 * i]!, cross[2 * i + 1]!];
    g.output(`present.${i}.encoder.key`, crossKey, floatType, crossDims);
    g.output(`present.${i}.encoder.value`, crossValue, floatType, crossDims);
    x = sublayer(g, spec, layer.crossNorm, x, `${name}.cross_norm`, (h) => attention(g, spec, layer.cross, h, crossKey, crossValue, crossBias, `${name}.cross`).output);
    x = sublayer(g, spec, layer.ffnNorm, x, `${name}.ffn_norm`, (h) => feedForward(g, spec, layer.ffn, h, `${name}.ffn`));
  });
  g.output('logits', lmHead(g, spec, weights, x, inputIds), floatType, ['batch_size', 'decoder_sequence_length', vocabSize]);
  return g;
}

/** The decoder's final norm (unless `normed` already) and head: logits [batch, decoder positions (those of `inputIds`), vocab]. */
function lmHead(g: GraphBuilder, spec: Seq2SeqSpec, weights: Seq2SeqWeights, hidden: string, inputIds: string, finalNorm = true): string {
  let x = hidden;
  if (spec.finalNorm && finalNorm) x = norm(g, spec, required(weights.decoder.finalNorm, 'decoder final norm'), x, 'decoder.final_norm');
  if (spec.headScale !== 1) x = g.op('Mul', [x, g.floatConstant([spec.headScale], [])]);
  const head = weights.lmHead === undefined ? 'shared.weight' : g.weight('lm_head.weight', weights.lmHead);
  // Linear takes the head's [vocab, d_model] as it is (the logits' bias inside), and keeps x's leading axes.
  if (g.addonLinear) {
    // BART's final_logits_bias is [1, vocab]: flat as Linear takes a bias (a Reshape folded at load).
    const bias = weights.logitsBias === undefined ? undefined : g.op('Reshape', [g.weight('final_logits_bias', weights.logitsBias), g.int64([-1])]);
    return addonLinear(g, x, head, bias, { transposed: true });
  }
  let logits = g.op('Gemm', [g.op('Reshape', [x, g.int64([-1, spec.dModel])]), head], { transB: 1 }, { name: 'lm_head' });
  if (weights.logitsBias !== undefined) logits = g.op('Add', [logits, g.weight('final_logits_bias', weights.logitsBias)]);
  const outShape = g.op('Concat', [g.op('Slice', [g.op('Shape', [inputIds]), g.int64([0]), g.int64([2])]), g.int64([spec.vocabSize])], { axis: 0 });
  return g.op('Reshape', [logits, outShape]);
}

/** Token embeddings (scaled), plus learned positions, plus the embedding norm, as the spec says. */
function embed(g: GraphBuilder, spec: Seq2SeqSpec, weights: Seq2SeqWeights, stack: StackWeights<unknown>, ids: string, positions: string, name: string): string {
  let x = g.op('Gather', [g.weight('shared.weight', weights.shared), ids], { axis: 0 }, { name: `${name}.embed` });
  if (spec.embedScale !== 1) x = g.op('Mul', [x, g.floatConstant([spec.embedScale], [])]);
  if (spec.positions.kind === 'learned') {
    const table = g.weight(`${name}.positions.weight`, required(stack.positions, `${name} positions`));
    x = g.op('Add', [x, g.op('Gather', [table, g.op('Add', [positions, g.int64([spec.positions.offset], [])])], { axis: 0 })]);
  }
  if (spec.embeddingNorm) x = norm(g, spec, required(stack.embeddingNorm, `${name} embedding norm`), x, `${name}.embedding_norm`);
  return x;
}

/** A residual sublayer: x + f(norm(x)) (pre-norm), or norm(x + f(x)) (post-norm). */
function sublayer(g: GraphBuilder, spec: Seq2SeqSpec, w: Norm, x: string, name: string, f: (h: string) => string): string {
  if (spec.preNorm) return g.op('Add', [x, f(norm(g, spec, w, x, name))]);
  // Through the addon (the slot encoder): the residual sum and its norm in one SkipLayerNormalization.
  if (g.addonLinear) return skipNorm(g, spec, w, x, { value: f(x) }, name)[0];
  return norm(g, spec, w, g.op('Add', [x, f(x)]), name);
}

/** [b, s, heads * headDim] -> [b, heads, s, headDim]. */
function heads(g: GraphBuilder, spec: Seq2SeqSpec, x: string): string {
  return g.op('Transpose', [g.op('Reshape', [x, g.int64([0, 0, spec.numHeads, spec.headDim])])], { perm: [0, 2, 1, 3] });
}

/**
 * Attention of the query input `h` over ready keys and values [b, heads, t, headDim], scores in float32:
 * the projected output, and the probabilities [b, heads, s, t].
 */
function attention(g: GraphBuilder, spec: Seq2SeqSpec, w: AttentionWeights, h: string, key: string, value: string, bias: string, name: string): { output: string; probs: string } {
  const q = heads(g, spec, linear(g, w.q, h, `${name}.q`));
  const scores = g.op('MatMul', [q, g.op('Transpose', [key], { perm: [0, 1, 3, 2] })]);
  const probs = maskedSoftmax(g, scores, spec.attentionScale, bias);
  const context = g.op('MatMul', [probs, value]);
  const merged = g.op('Reshape', [g.op('Transpose', [context], { perm: [0, 2, 1, 3] }), g.int64([0, 0, spec.numHeads * spec.headDim])]);
  return { output: linear(g, w.o, merged, `${name}.o`), probs };
}

/**
 * The slot encoder's self-attention: ONNX Runtime's MultiHeadAttention (fused kernels, the padding as
 * each row's source length) or MatMul and Softmax (scores in float32, as the other graphs).
 */
export type EncoderAttention = 'MultiHeadAttention' | 'MatMul';

/** MultiHeadAttention for float16 and bfloat16 models without a relative position bias; MatMul otherwise. */
export function defaultEncoderAttention(spec: Seq2SeqSpec, floatType: FloatType): EncoderAttention {
  return floatType !== 'float32' && spec.positions.kind !== 'relative' ? 'MultiHeadAttention' : 'MatMul';
}

/**
 * Self-attention of `h` through ONNX Runtime's MultiHeadAttention, keys past each row's length masked
 * (`keyLengths`: paddingLengths); then the output projection.
 */
function fusedAttention(g: GraphBuilder, spec: Seq2SeqSpec, w: AttentionWeights, h: string, keyLengths: string, name: string): string {
  // q, k and v each in their own projection, biases inside: MultiHeadAttention then reads them where
  // they are (one packed projection needed a Split, and the attention's own bias pass a transpose).
  const [q, k, v] = (['q', 'k', 'v'] as const).map((part) => linear(g, w[part], h, `${name}.${part}`));
  const context = g.op('MultiHeadAttention', [q!, k!, v!, '', keyLengths], { num_heads: spec.numHeads, scale: float(spec.attentionScale) }, { domain: MS });
  return linear(g, w.o, context, `${name}.o`);
}

/** q, k and v of `h` by one MatMul over their concatenated weights, split. */
function projectQkv(g: GraphBuilder, w: AttentionWeights, h: string, width: number, name: string): string[] {
  const { weight, bias } = packedQkv(g, w, name);
  const qkv = affine(g, h, weight, bias, 3 * width);
  return g.opMany('Split', [qkv, g.int64([width, width, width])], { axis: -1 }, { outputs: 3 });
}

/**
 * The slot decoder's feed-forward block: through the addon's Linear, each activation inside the
 * projection before it and the down projection's bias left to the residual norm after it.
 */
function slotFeedForward(g: GraphBuilder, spec: Seq2SeqSpec, w: FeedForwardWeights, h: string, name: string): Projected {
  if (!g.addonLinear) return { value: fusedFeedForward(g, spec, w, h, name) };
  return projectBiasAfter(g, w.down, linearInner(g, spec, w, h, name), `${name}.down`);
}

/** The feed-forward block's inner activations through the addon's Linear (each activation inside its projection). */
function linearInner(g: GraphBuilder, spec: Seq2SeqSpec, w: FeedForwardWeights, h: string, name: string): string {
  if (spec.ffn === 'relu' || spec.ffn === 'gelu') return linearWith(g, w.up, h, `${name}.up`, spec.ffn);
  const up = linear(g, w.up, h, `${name}.up`);
  const gate = linearWith(g, required(w.gate, `${name} gate`), h, `${name}.gate`, spec.ffn === 'gated_gelu_new' ? 'gelu_tanh' : 'silu');
  return g.op('Mul', [gate, up]);
}

/** The feed-forward block with ONNX Runtime's fused activations (FastGelu for gelu_new, Gelu for the erf form). */
function fusedFeedForward(g: GraphBuilder, spec: Seq2SeqSpec, w: FeedForwardWeights, h: string, name: string): string {
  if (spec.ffn === 'gated_gelu_new') {
    const gate = g.op('FastGelu', [linear(g, required(w.gate, `${name} gate`), h, `${name}.gate`)], {}, { domain: MS });
    return linear(g, w.down, g.op('Mul', [gate, linear(g, w.up, h, `${name}.up`)]), `${name}.down`);
  }
  if (spec.ffn === 'gelu') return linear(g, w.down, g.op('Gelu', [linear(g, w.up, h, `${name}.up`)], {}, { domain: MS }), `${name}.down`);
  return feedForward(g, spec, w, h, name);
}

/** The feed-forward block; through the addon's Linear, each activation inside the projection before it. */
function feedForward(g: GraphBuilder, spec: Seq2SeqSpec, w: FeedForwardWeights, h: string, name: string): string {
  if (g.addonLinear) return linear(g, w.down, linearInner(g, spec, w, h, name), `${name}.down`);
  const up = linear(g, w.up, h, `${name}.up`);
  let inner: string;
  if (spec.ffn === 'relu') inner = g.op('Relu', [up]);
  else if (spec.ffn === 'gated_gelu_new') inner = g.op('Mul', [geluTanh(g, linear(g, required(w.gate, `${name} gate`), h, `${name}.gate`)), up]);
  else if (spec.ffn === 'gated_silu') {
    const gate = linear(g, required(w.gate, `${name} gate`), h, `${name}.gate`);
    inner = g.op('Mul', [silu(g, gate), up]);
  } else inner = geluErf(g, up);
  return linear(g, w.down, inner, `${name}.down`);
}

/**
 * MultiHeadAttention's padding for right-padded rows of `mask` [b, t] (int32 [3b + 2]): each row's
 * length, then where each row's queries and keys start in the batch (b t for row b) and where the last
 * ends, the form its memory-efficient (cutlass) kernel takes.
 */
function paddingLengths(g: GraphBuilder, mask: string): string {
  const lengths = g.op('Cast', [g.op('ReduceSum', [mask, g.int64([1])], { keepdims: 0 })], { to: 6 });
  const dims = g.op('Cast', [g.op('Shape', [mask])], { to: 6 });
  const [rows, width] = [0, 1].map((i) => g.op('Gather', [dims, g.constantOf('int32', [i], [])], { axis: 0 }));
  const starts = g.op('Range', [g.constantOf('int32', [0], []), g.op('Mul', [g.op('Add', [rows!, g.constantOf('int32', [1], [])]), width!]), width!]);
  return g.op('Concat', [lengths, starts, starts], { axis: 0 });
}

/** [b, 1, 1, t] float32: 0 for real tokens, float32's minimum for padding. */
function paddingBias(g: GraphBuilder, mask: string): string {
  const real = g.op('Unsqueeze', [g.op('Cast', [mask], { to: 9 }), g.int64([1, 2])]);
  return additiveMask(g, real);
}

/** T5's position bias [1, heads, queries, keys] in float32, from the bucket of key - query position. */
function relativeBias(
  g: GraphBuilder,
  { numBuckets, maxDistance }: { numBuckets: number; maxDistance: number },
  table: Tensor,
  queryPositions: string,
  keyPositions: string,
  bidirectional: boolean,
  name: string,
): string {
  const relative = g.op('Sub', [g.op('Unsqueeze', [keyPositions, g.int64([0])]), g.op('Unsqueeze', [queryPositions, g.int64([1])])]);
  const clipped = g.op('Max', [g.op('Min', [relative, g.int64([maxDistance], [])]), g.int64([-maxDistance], [])]);
  const buckets = g.op('Gather', [g.int64(relativeBucketTable(bidirectional, numBuckets, maxDistance)), g.op('Add', [clipped, g.int64([maxDistance], [])])], { axis: 0 });
  const values = g.op('Gather', [g.weight(`${name}.relative_bias.weight`, table), buckets], { axis: 0 });
  const perHead = g.op('Unsqueeze', [g.op('Transpose', [values], { perm: [2, 0, 1] }), g.int64([0])]);
  return g.half ? g.op('Cast', [perHead], { to: 1 }) : perHead;
}
