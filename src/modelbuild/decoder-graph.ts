/**
 * The decoder graph in the Optimum / transformers.js layout: `input_ids`, `attention_mask`,
 * `position_ids` and `past_key_values.{i}.key|value` in; `logits` and `present.{i}.key|value` out.
 * Keys and values are [batch, kv_heads, length, head_dim]; a past of length 0 is the prefill.
 * Standard ONNX operators only (opset 17), so any execution provider runs it.
 */
import { ChorusError } from '../errors.ts';
import { float, GraphBuilder } from './graph.ts';
import type { DecoderLayerWeights, DecoderSpec, DecoderWeights, Linear, Norm } from './decoder-spec.ts';

const FLOAT32_MIN = -3.4028234663852886e38;

/** Builds the decoder graph of `spec` with `weights`. */
export function buildDecoderGraph(spec: DecoderSpec, weights: DecoderWeights, floatType: 'float32' | 'float16'): GraphBuilder {
  const g = new GraphBuilder(floatType);
  const { numLayers, numKvHeads, headDim, vocabSize } = spec;
  const inputIds = g.input('input_ids', 'int64', ['batch_size', 'sequence_length']);
  const attentionMask = g.input('attention_mask', 'int64', ['batch_size', 'total_sequence_length']);
  const positionIds = g.input('position_ids', 'int64', ['batch_size', 'sequence_length']);
  const past = Array.from({ length: numLayers }, (_, i) => ({
    key: g.input(`past_key_values.${i}.key`, floatType, ['batch_size', numKvHeads, 'past_sequence_length', headDim]),
    value: g.input(`past_key_values.${i}.value`, floatType, ['batch_size', numKvHeads, 'past_sequence_length', headDim]),
  }));

  const embedTokens = g.weight('embed_tokens.weight', weights.embedTokens);
  let x = g.op('Gather', [embedTokens, inputIds], { axis: 0 }, { name: 'embed' });
  if (spec.positions.kind === 'learned') {
    const table = g.weight('embed_positions.weight', required(weights.embedPositions, 'position embeddings'));
    x = g.op('Add', [x, g.op('Gather', [table, positionIds], { axis: 0 })]);
  }
  const bias = attentionBias(g, inputIds, attentionMask);
  const rotary = spec.positions.kind === 'rotary' ? rotaryTables(g, positionIds, headDim, spec.positions.theta) : undefined;

  weights.layers.forEach((layer, i) => {
    const { hidden, presentKey, presentValue } = block(g, spec, layer, i, x, past[i]!, bias, rotary);
    x = hidden;
    g.output(`present.${i}.key`, presentKey, floatType, ['batch_size', numKvHeads, 'total_sequence_length', headDim]);
    g.output(`present.${i}.value`, presentValue, floatType, ['batch_size', numKvHeads, 'total_sequence_length', headDim]);
  });

  x = norm(g, spec, weights.finalNorm, x, 'final_norm');
  // The head as Gemm with transB, so a tied head reads the embedding initializer instead of a copy.
  const head = weights.lmHead === undefined ? embedTokens : g.weight('lm_head.weight', weights.lmHead);
  const flat = g.op('Reshape', [x, g.int64([-1, spec.hiddenSize])]);
  const logits2d = g.op('Gemm', [flat, head], { transB: 1 }, { name: 'lm_head' });
  const outShape = g.op('Concat', [g.op('Slice', [g.op('Shape', [inputIds]), g.int64([0]), g.int64([2])]), g.int64([vocabSize])], { axis: 0 });
  g.output('logits', g.op('Reshape', [logits2d, outShape]), floatType, ['batch_size', 'sequence_length', vocabSize]);
  return g;
}

/**
 * The additive attention bias, [batch, 1, 1, seq, total], float32 whatever the build's type: 0 where a
 * query may attend (the key is not padding and not in its future), float32's minimum elsewhere. Query i
 * sits at absolute position past + i, where past = total - seq. (In float16 the minimum plus a score
 * overflows to -inf, and a row with nothing to attend, a padding query, would become NaN.)
 */
function attentionBias(g: GraphBuilder, inputIds: string, attentionMask: string): string {
  const seq = g.op('Slice', [g.op('Shape', [inputIds]), g.int64([1]), g.int64([2])]);
  const total = g.op('Slice', [g.op('Shape', [attentionMask]), g.int64([1]), g.int64([2])]);
  const pastLength = g.op('Squeeze', [g.op('Sub', [total, seq])]);
  const totalScalar = g.op('Squeeze', [total]);
  const zero = g.int64([0], []);
  const one = g.int64([1], []);
  const keyPositions = g.op('Range', [zero, totalScalar, one]);
  const queryPositions = g.op('Range', [pastLength, totalScalar, one]);
  const causal = g.op('LessOrEqual', [g.op('Unsqueeze', [keyPositions, g.int64([0])]), g.op('Unsqueeze', [queryPositions, g.int64([1])])]);
  const notPadding = g.op('Unsqueeze', [g.op('Cast', [attentionMask], { to: 9 }), g.int64([1, 2, 3])]);
  const allowed = g.op('And', [causal, notPadding]);
  return g.op('Where', [allowed, g.floatConstant([0], [], 'float32'), g.floatConstant([FLOAT32_MIN], [], 'float32')], {}, { name: 'attention_bias' });
}

/**
 * cos and sin of position * inverse frequency, [batch, 1, seq, head_dim], halves repeated (Hugging Face's
 * rotate-half layout). Computed in float32 from float32 inverse frequencies, as transformers does.
 */
function rotaryTables(g: GraphBuilder, positionIds: string, headDim: number, theta: number): { cos: string; sin: string } {
  const invFreq = Array.from({ length: headDim / 2 }, (_, i) => Math.fround(1 / Math.fround(Math.pow(theta, Math.fround((2 * i) / headDim)))));
  const positions = g.op('Unsqueeze', [g.op('Cast', [positionIds], { to: 1 }), g.int64([2])]);
  const freqs = g.op('Mul', [positions, g.floatConstant(invFreq, [headDim / 2], 'float32')]);
  const angles = g.op('Unsqueeze', [g.op('Concat', [freqs, freqs], { axis: -1 }), g.int64([1])]);
  const cast = (value: string): string => (g.floatType === 'float16' ? g.op('Cast', [value], { to: 10 }) : value);
  return { cos: cast(g.op('Cos', [angles], {}, { name: 'rope_cos' })), sin: cast(g.op('Sin', [angles], {}, { name: 'rope_sin' })) };
}

function rotate(g: GraphBuilder, x: string, tables: { cos: string; sin: string }, headDim: number): string {
  const half = headDim / 2;
  const first = g.op('Slice', [x, g.int64([0]), g.int64([half]), g.int64([3])]);
  const second = g.op('Slice', [x, g.int64([half]), g.int64([headDim]), g.int64([3])]);
  const rotated = g.op('Concat', [g.op('Neg', [second]), first], { axis: 3 });
  return g.op('Add', [g.op('Mul', [x, tables.cos]), g.op('Mul', [rotated, tables.sin])]);
}

function block(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderLayerWeights,
  index: number,
  x: string,
  past: { key: string; value: string },
  bias: string,
  rotary: { cos: string; sin: string } | undefined,
): { hidden: string; presentKey: string; presentValue: string } {
  const { numHeads, numKvHeads, headDim } = spec;
  const name = `layers.${index}`;
  const h = norm(g, spec, w.inputNorm, x, `${name}.input_norm`);
  const heads = (value: string, count: number): string =>
    g.op('Transpose', [g.op('Reshape', [value, g.int64([0, 0, count, headDim])])], { perm: [0, 2, 1, 3] });
  let q = heads(linear(g, w.q, h, `${name}.q`), numHeads);
  let k = heads(linear(g, w.k, h, `${name}.k`), numKvHeads);
  const v = heads(linear(g, w.v, h, `${name}.v`), numKvHeads);
  if (rotary) {
    q = rotate(g, q, rotary, headDim);
    k = rotate(g, k, rotary, headDim);
  }
  const presentKey = g.op('Concat', [past.key, k], { axis: 2 });
  const presentValue = g.op('Concat', [past.value, v], { axis: 2 });
  // Grouped-query attention by broadcasting: queries [b, kv, rep, s, d] against keys [b, kv, 1, t, d].
  const groups = numHeads / numKvHeads;
  const q5 = g.op('Reshape', [q, g.int64([0, numKvHeads, groups, -1, headDim])]);
  const k5 = g.op('Unsqueeze', [presentKey, g.int64([2])]);
  const v5 = g.op('Unsqueeze', [presentValue, g.int64([2])]);
  const scores = g.op('MatMul', [q5, g.op('Transpose', [k5], { perm: [0, 1, 2, 4, 3] })]);
  // Scale, mask and softmax in float32, as transformers does for half-precision models.
  const half = g.floatType === 'float16';
  const scores32 = half ? g.op('Cast', [scores], { to: 1 }) : scores;
  const scaled = g.op('Add', [g.op('Mul', [scores32, g.floatConstant([1 / Math.sqrt(headDim)], [], 'float32')]), bias]);
  const probs32 = g.op('Softmax', [scaled], { axis: -1 });
  const probs = half ? g.op('Cast', [probs32], { to: 10 }) : probs32;
  const context = g.op('MatMul', [probs, v5]);
  const merged = g.op('Reshape', [g.op('Transpose', [g.op('Reshape', [context, g.int64([0, numHeads, -1, headDim])])], { perm: [0, 2, 1, 3] }), g.int64([0, 0, numHeads * headDim])]);
  const attended = g.op('Add', [x, linear(g, w.o, merged, `${name}.o`)]);

  const m = norm(g, spec, w.postNorm, attended, `${name}.post_norm`);
  let inner: string;
  if (spec.mlp === 'silu_gated') {
    const gate = linear(g, required(w.gate, `layer ${index} gate projection`), m, `${name}.gate`);
    inner = g.op('Mul', [g.op('Mul', [gate, g.op('Sigmoid', [gate])]), linear(g, w.up, m, `${name}.up`)]);
  } else {
    inner = geluTanh(g, linear(g, w.up, m, `${name}.up`));
  }
  return { hidden: g.op('Add', [attended, linear(g, w.down, inner, `${name}.down`)]), presentKey, presentValue };
}

function linear(g: GraphBuilder, w: Linear, x: string, name: string): string {
  const y = g.op('MatMul', [x, g.weight(`${name}.weight`, w.weight)]);
  return w.bias === undefined ? y : g.op('Add', [y, g.weight(`${name}.bias`, w.bias)]);
}

function norm(g: GraphBuilder, spec: DecoderSpec, w: Norm, x: string, name: string): string {
  const scale = g.weight(`${name}.weight`, w.weight);
  if (spec.norm === 'layernorm') {
    return g.op('LayerNormalization', [x, scale, g.weight(`${name}.bias`, required(w.bias, `${name} bias`))], { axis: -1, epsilon: float(spec.normEps) });
  }
  // RMSNorm in float32, as transformers computes it: x / sqrt(mean(x^2) + eps), then the scale.
  const xf = g.floatType === 'float16' ? g.op('Cast', [x], { to: 1 }) : x;
  const meanSquare = g.op('ReduceMean', [g.op('Mul', [xf, xf])], { axes: [-1], keepdims: 1 });
  const inverse = g.op('Reciprocal', [g.op('Sqrt', [g.op('Add', [meanSquare, g.floatConstant([spec.normEps], [], 'float32')])])]);
  const normalized = g.op('Mul', [xf, inverse]);
  return g.op('Mul', [scale, g.floatType === 'float16' ? g.op('Cast', [normalized], { to: 10 }) : normalized]);
}

/** GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
function geluTanh(g: GraphBuilder, x: string): string {
  const cube = g.op('Mul', [g.op('Mul', [x, x]), x]);
  const inner = g.op('Mul', [g.op('Add', [x, g.op('Mul', [cube, g.floatConstant([0.044715], [])])]), g.floatConstant([Math.sqrt(2 / Math.PI)], [])]);
  return g.op('Mul', [g.op('Mul', [x, g.floatConstant([0.5], [])]), g.op('Add', [g.op('Tanh', [inner]), g.floatConstant([1], [])])]);
}

function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new ChorusError('CHORUS_INTERNAL', `the architecture gave no ${what}`);
  return value;
}
