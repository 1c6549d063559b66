/** Building blocks shared by the decoder-only and encoder-decoder graphs. */
import { ChorusError } from '../errors.ts';
import type { Linear, Norm } from './decoder-spec.ts';
import type { FloatType } from './float-bits.ts';
import { float, type GraphBuilder } from './graph.ts';
import { concatQuantized, quantizedGatedMatMul, quantizedMatMul, quantizedValue, quantizedWeight, takesQuantizedGated } from './quant/graph.ts';

/** float32's lowest value: the additive bias of a position that may not be attended. */
export const FLOAT32_MIN = -3.4028234663852886e38;

/** A float32 additive bias from a boolean tensor: 0 where `allowed`, float32's minimum elsewhere. */
export function additiveMask(g: GraphBuilder, allowed: string, name?: string): string {
  return g.op('Where', [allowed, g.floatConstant([0], [], 'float32'), g.floatConstant([FLOAT32_MIN], [], 'float32')], {}, name === undefined ? {} : { name });
}

/**
 * Attention probabilities from raw scores: scaled (when `scale` is not 1), soft-capped when `softcap`
 * is given (softcap * tanh(scores / softcap)), plus the float32 `bias`, softmax over the last axis, all
 * in float32 as transformers does for half-precision models; returned in the build's float type.
 */
export function maskedSoftmax(g: GraphBuilder, scores: string, scale: number, bias: string, softcap?: number): string {
  const half = g.half;
  let x = half ? g.op('Cast', [scores], { to: 1 }) : scores;
  if (scale !== 1) x = g.op('Mul', [x, g.floatConstant([scale], [], 'float32')]);
  if (softcap !== undefined) x = capped(g, x, softcap, 'float32');
  const probs = g.op('Softmax', [g.op('Add', [x, bias])], { axis: -1 });
  return half ? g.toFloatType(probs) : probs;
}

/** Which norm, and its epsilon. */
export interface NormKind {
  norm: 'layernorm' | 'rmsnorm';
  normEps: number;
}

/** `x @ weight (+ bias)`; the weights are named `<name>.weight` and `<name>.bias`. */
export function linear(g: GraphBuilder, w: Linear, x: string, name: string): string {
  const { weight, bias } = linearWeights(g, w, name);
  return affine(g, x, weight, bias, w.weight.dims[1]!);
}

/**
 * A linear layer's weight and bias registered as `<name>.weight` and `<name>.bias`, in that order. A
 * quantized weight registers its parts and is known by the same name (`matMul` and `affine` take it).
 */
export function linearWeights(g: GraphBuilder, w: Linear, name: string): { weight: string; bias: string | undefined } {
  const weight = w.quantized === undefined ? g.weight(`${name}.weight`, w.weight) : quantizedWeight(g, name, w.quantized);
  return { weight, bias: w.bias === undefined ? undefined : g.weight(`${name}.bias`, w.bias) };
}

/** `x @ weight`, a float weight (MatMul) or a quantized one. */
export function matMul(g: GraphBuilder, x: string, weight: string): string {
  const quantized = quantizedValue(g, weight);
  return quantized === undefined ? g.op('MatMul', [x, weight]) : quantizedMatMul(g, x, quantized);
}

/**
 * The weight (and bias) of q, k and v concatenated, for one projection (ONNX Runtime folds the
 * concatenations when the session loads). They register as `linear` registers them, q, k, v, each
 * weight then its bias, so that a decoder's models share one data file. q, k and v have biases or none.
 */
export function packedQkv(g: GraphBuilder, w: { q: Linear; k: Linear; v: Linear }, name: string): { weight: string; bias: string | undefined } {
  const parts = (['q', 'k', 'v'] as const).map((part) => linearWeights(g, w[part], `${name}.${part}`));
  if (parts.some((p) => p.bias === undefined) && parts.some((p) => p.bias !== undefined)) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${name}: q, k and v must all have biases or none`);
  }
  const quantized = parts.filter((p) => quantizedValue(g, p.weight) !== undefined).length;
  if (quantized !== 0 && quantized !== parts.length) throw new ChorusError('CHORUS_UNSUPPORTED', `${name}: q, k and v must all be quantized or none`);
  const weight =
    quantized > 0
      ? concatQuantized(g, parts.map((p) => p.weight), `${name}.qkv.weight`)
      : g.op('Concat', parts.map((p) => p.weight), { axis: 1 }, { name: `${name}.qkv.weight` });
  const bias = parts[0]!.bias === undefined ? undefined : g.op('Concat', parts.map((p) => p.bias!), { axis: 0 }, { name: `${name}.qkv.bias` });
  return { weight, bias };
}

/** ONNX Runtime's contrib operators' domain. */
export const MS = 'com.microsoft';

/** A projection's output whose bias the operator after it adds (none: added already, or no bias). */
export interface Projected {
  value: string;
  bias?: string;
}

/**
 * `x @ weight (+ bias)` for an operator that can add the bias itself (a fused residual norm, the slot
 * attention): through the addon's Linear, the bias is left to it (so a large batch's projection is one
 * cuBLAS GEMM with no pass of its own for the bias); otherwise it is added here. The weights are named
 * as `linear` names them.
 */
export function projectBiasAfter(g: GraphBuilder, w: Linear, x: string, name: string): Projected {
  if (!g.addonLinear) return { value: linear(g, w, x, name) };
  const { weight, bias } = linearWeights(g, w, name);
  return { value: addonLinear(g, x, weight, undefined), ...(bias === undefined ? {} : { bias }) };
}

/** The projection's output with its bias added (an Add where one is left). */
export function withBias(g: GraphBuilder, p: Projected): string {
  return p.bias === undefined ? p.value : g.op('Add', [p.value, p.bias]);
}

/**
 * `sum = x + delta` (plus delta's bias) and the norm of the sum in one of ONNX Runtime's fused operators
 * (SkipLayerNormalization, SkipSimplifiedLayerNormalization): [normed, sum].
 */
export function skipNorm(g: GraphBuilder, spec: NormKind, w: Norm, x: string, delta: Projected, name: string): [string, string] {
  const epsilon = float(spec.normEps);
  const scale = g.weight(`${name}.weight`, w.weight);
  const bias = delta.bias === undefined ? [] : [delta.bias];
  const [normed, , , sum] =
    spec.norm === 'rmsnorm'
      ? g.opMany('SkipSimplifiedLayerNormalization', [delta.value, x, scale, ...bias], { epsilon }, { domain: MS, outputs: 4 })
      : g.opMany('SkipLayerNormalization', [delta.value, x, scale, g.weight(`${name}.bias`, required(w.bias, `${name} bias`)), ...bias], { epsilon }, { domain: MS, outputs: 4 });
  return [normed!, sum!];
}

/** `activation(x @ weight + bias)` through the addon's Linear; the weights named as `linear` names them. */
export function linearWith(g: GraphBuilder, w: Linear, x: string, name: string, activation: LinearActivation): string {
  const { weight, bias } = linearWeights(g, w, name);
  return addonLinear(g, x, weight, bias, { activation });
}

/**
 * A gated MLP's `activation(x @ gate + bias) * (x @ up + bias)` as one of the addon's Linear operators
 * (`gated`: its weight the gate's rows then the up projection's, concatenated and transposed in the
 * graph, which ONNX Runtime folds when the session loads): the two products read in one kernel, with
 * the rounding of two Linear operators and a Mul. The weights are named as `linear` names them, the
 * gate's first.
 */
export function gatedLinear(g: GraphBuilder, gate: Linear, up: Linear, x: string, name: string, activation: LinearActivation): string {
  if (!plainWeights(gate) || !plainWeights(up)) throw new ChorusError('CHORUS_INTERNAL', `${name}: a gated Linear takes plain weights, not quantized ones`);
  const a = linearWeights(g, gate, `${name}.gate`);
  const b = linearWeights(g, up, `${name}.up`);
  if ((a.bias === undefined) !== (b.bias === undefined)) throw new ChorusError('CHORUS_UNSUPPORTED', `${name}: the gate and up projections must both have biases or neither`);
  const weight = g.op('Transpose', [g.op('Concat', [a.weight, b.weight], { axis: 1 }, { name: `${name}.gate_up.weight` })], { perm: [1, 0] });
  const bias = a.bias === undefined ? [] : [g.op('Concat', [a.bias, b.bias!], { axis: 0 }, { name: `${name}.gate_up.bias` })];
  return g.op('Linear', [x, weight, ...bias], { activation, gated: 1 }, { domain: 'chorus' });
}

/**
 * A gated MLP of quantized gate and up projections as one gated QuantLinear (quantizedGatedMatMul), the
 * weights named as `linear` names them; undefined where it does not take them (the caller then keeps
 * the two projections and a Mul).
 */
export function quantizedGatedLinear(g: GraphBuilder, gate: Linear, up: Linear, x: string, name: string, activation: LinearActivation): string | undefined {
  if (gate.quantized === undefined || up.quantized === undefined || !takesQuantizedGated(g, gate.quantized, up.quantized) || (gate.bias === undefined) !== (up.bias === undefined)) return undefined;
  const a = linearWeights(g, gate, `${name}.gate`);
  const b = linearWeights(g, up, `${name}.up`);
  const bias = a.bias === undefined ? undefined : g.op('Concat', [a.bias, b.bias!], { axis: 0 }, { name: `${name}.gate_up.bias` });
  return quantizedGatedMatMul(g, x, a.weight, b.weight, name, bias, activation);
}

/** Whether a projection's weight is plain floats: not one a quantized build gives (in `quantized`), which gatedLinear cannot concatenate. */
export function plainWeights(w: Linear): boolean {
  return !('quantized' in w) || w.quantized === undefined;
}

/** Lanes of ones a float16 projection with a bias adds to its input; the weight gains the bias row and zero rows (the width stays a multiple of 8). */
const BIAS_LANES = 8;

/**
 * `x @ weight + bias` for `x` [batch, seq, in] and `weight` [in, out]. In float16 graphs that round as
 * PyTorch does (`pytorchRounding`: the decoder models of both flavors) the bias goes inside the product,
 * so the sum is rounded to float16 once, as PyTorch's addmm does (a MatMul then an Add would round
 * twice, a last-bit difference on a large share of the outputs): `x` gains lanes of ones and the
 * weight the rows [bias; 0; ...], a concatenation ONNX Runtime folds when the session loads. The Pad
 * takes the place of the Add, so the step has as many kernels as before.
 */
export function affine(g: GraphBuilder, x: string, weight: string, bias: string | undefined, outputs: number): string {
  const quantized = quantizedValue(g, weight);
  if (quantized !== undefined) return quantizedMatMul(g, x, quantized, bias);
  if (g.addonLinear) return addonLinear(g, x, weight, bias);
  if (bias === undefined) return g.op('MatMul', [x, weight]);
  if (!g.half || !g.pytorchRounding) return g.op('Add', [g.op('MatMul', [x, weight]), bias]);
  const lanes = g.op('Pad', [x, g.int64([0, 0, 0, 0, 0, BIAS_LANES]), g.floatConstant([1], [])]);
  // Concat and Unsqueeze of initializers only (ONNX Runtime has no float16 Pad on the CPU to fold with).
  const zeros = g.floatConstant(new Array<number>((BIAS_LANES - 1) * outputs).fill(0), [BIAS_LANES - 1, outputs]);
  return g.op('MatMul', [lanes, g.op('Concat', [weight, g.op('Unsqueeze', [bias, g.int64([0])]), zeros], { axis: 0 })]);
}

/**
 * The slot models' projections: the addon's Linear (bias and activation inside; a kernel of its own for
 * the few rows of a decode step) or MatMul. Linear by default in float16, the type the slot models run
 * on CUDA in; float32 slot models also run on the CPU, where ONNX Runtime's MatMul is the faster.
 */
export type SlotLinear = 'addon' | 'MatMul';

export function defaultSlotLinear(floatType: FloatType): SlotLinear {
  return floatType === 'float32' ? 'MatMul' : 'addon';
}

/** The activations the addon's Linear applies to its output. */
export type LinearActivation = 'relu' | 'gelu' | 'gelu_tanh' | 'silu';

/**
 * `activation(x @ weight + bias)` as one of the native addon's Linear operators (domain `chorus`): the
 * sum rounded once with its bias, the activation taken of it in float32. Linear takes nn.Linear's
 * [out, in] weight: a `weight` in MatMul's [in, out] layout (which the other graphs share) goes through
 * a Transpose that ONNX Runtime folds when the session loads; `transposed` says it is [out, in] already.
 * `last`: x is [batch, sequence, in] and only each row's last position is projected ([batch, 1, out]),
 * by the Linear itself (a decode step's one position then needs no Slice, and a norm before it folds in).
 * `lastIndex` (with `last`, a float weight): an int32 [batch] value naming each row's position to
 * project instead of its last (the Linear's input 6; a decode step's one position is taken as it is).
 */
export function addonLinear(
  g: GraphBuilder,
  x: string,
  weight: string,
  bias: string | undefined,
  options: { activation?: LinearActivation; transposed?: boolean; last?: boolean; lastIndex?: string; softcap?: number } = {},
): string {
  if (options.lastIndex !== undefined && options.last !== true) throw new ChorusError('CHORUS_INTERNAL', 'a Linear takes lastIndex with last only');
  const quantized = quantizedValue(g, weight);
  if (quantized !== undefined) {
    if (options.lastIndex !== undefined) throw new ChorusError('CHORUS_INTERNAL', 'a quantized projection takes no lastIndex');
    const activation = options.activation;
    const rows = options.last === true ? lastPosition(g, x) : x;
    const y = quantizedMatMul(g, rows, quantized, bias, activation === undefined ? undefined : { name: activation, apply: (v) => activated(g, v, activation) });
    return options.softcap === undefined ? y : capped(g, y, options.softcap);
  }
  const rows = options.transposed === true ? weight : g.op('Transpose', [weight], { perm: [1, 0] });
  const attributes = {
    ...(options.activation === undefined ? {} : { activation: options.activation }),
    ...(options.last === true ? { last: 1 } : {}),
    ...(options.softcap === undefined ? {} : { softcap: float(options.softcap) }),
  };
  // Inputs 3 to 5 (the pre-norm's residual, norm and post-norm) left out before last_index.
  const inputs = options.lastIndex === undefined ? [x, rows, ...(bias === undefined ? [] : [bias])] : [x, rows, bias ?? '', '', '', '', options.lastIndex];
  return g.op('Linear', inputs, attributes, { domain: 'chorus' });
}

/** x [batch, sequence, ...] at each row's last position: [batch, 1, ...]. */
export function lastPosition(g: GraphBuilder, x: string): string {
  return g.op('Slice', [x, g.int64([-1]), g.int64([Number.MAX_SAFE_INTEGER]), g.int64([1])]);
}

/** `activation(x)` as separate operators (after a projection the addon's Linear does not run). */
function activated(g: GraphBuilder, x: string, activation: LinearActivation): string {
  if (activation === 'relu') return g.op('Relu', [x]);
  if (activation === 'silu') return inFloat32(g, x, (v) => g.op('Mul', [v, g.op('Sigmoid', [v])]));
  return activation === 'gelu' ? geluErf(g, x) : geluTanh(g, x);
}

/** `f` of `x` computed in float32 and rounded to float16 once, as PyTorch computes half-precision activations. */
export function inFloat32(g: GraphBuilder, x: string, f: (x32: string) => string): string {
  if (!g.half) return f(x);
  return g.toFloatType(f(g.op('Cast', [x], { to: 1 })));
}

/** SiLU, x * sigmoid(x) (in float32 for float16 builds that round as PyTorch does). */
export function silu(g: GraphBuilder, x: string): string {
  const f = (v: string): string => g.op('Mul', [v, g.op('Sigmoid', [v])]);
  return g.pytorchRounding ? inFloat32(g, x, f) : f(x);
}

/** GELU's exact form, 0.5 x (1 + erf(x / sqrt(2))) (in float32 for float16 builds). */
export function geluErf(g: GraphBuilder, x: string): string {
  return inFloat32(g, x, (v) =>
    g.op('Mul', [g.op('Mul', [v, g.floatConstant([0.5], [], 'float32')]), g.op('Add', [g.op('Erf', [g.op('Mul', [v, g.floatConstant([Math.SQRT1_2], [], 'float32')])]), g.floatConstant([1], [], 'float32')])]),
  );
}

/** LayerNorm, or RMSNorm computed in float32 as transformers does (T5LayerNorm is the same). */
export function norm(g: GraphBuilder, spec: NormKind, w: Norm, x: string, name: string): string {
  const scale = g.weight(`${name}.weight`, w.weight);
  if (spec.norm === 'layernorm') {
    return g.op('LayerNormalization', [x, scale, g.weight(`${name}.bias`, required(w.bias, `${name} bias`))], { axis: -1, epsilon: float(spec.normEps) });
  }
  // RMSNorm in float32, as transformers computes it: x / sqrt(mean(x^2) + eps), then the scale.
  const xf = g.half ? g.op('Cast', [x], { to: 1 }) : x;
  const meanSquare = g.op('ReduceMean', [g.op('Mul', [xf, xf])], { axes: [-1], keepdims: 1 });
  const inverse = g.op('Reciprocal', [g.op('Sqrt', [g.op('Add', [meanSquare, g.floatConstant([spec.normEps], [], 'float32')])])]);
  const normalized = g.op('Mul', [xf, inverse]);
  return g.op('Mul', [scale, g.half ? g.toFloatType(normalized) : normalized]);
}

/**
 * GPT-2's and T5 v1.1's gelu_new, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), step by step as
 * transformers' NewGELUActivation computes it: in float16 each operation's result is rounded, and a
 * product with a constant is taken with the constant in float32 (PyTorch's scalars), then rounded.
 */
export function geluTanh(g: GraphBuilder, x: string): string {
  const scaled = (v: string, factor: number): string => inFloat32(g, v, (v32) => g.op('Mul', [v32, g.floatConstant([factor], [], 'float32')]));
  const cube = g.op('Pow', [x, g.floatConstant([3], [])]);
  const inner = scaled(g.op('Add', [x, scaled(cube, 0.044715)]), Math.sqrt(2 / Math.PI));
  return g.op('Mul', [g.op('Mul', [x, g.floatConstant([0.5], [])]), g.op('Add', [g.op('Tanh', [inner]), g.floatConstant([1], [])])]);
}

/** Soft-capping, `cap * tanh(x / cap)`, in `type` (the build's float type by default). */
export function capped(g: GraphBuilder, x: string, cap: number, type: FloatType = g.floatType): string {
  const c = g.floatConstant([cap], [], type);
  return g.op('Mul', [g.op('Tanh', [g.op('Div', [x, c])]), c]);
}

/**
 * PyTorch's gelu(approximate='tanh') (transformers' gelu_pytorch_tanh), 0.5 x (1 + tanh(sqrt(2 / pi)
 * (x + 0.044715 x^3))), in float32 and rounded once for 16-bit builds, as PyTorch's kernel computes it.
 */
export function geluPytorchTanh(g: GraphBuilder, x: string): string {
  return inFloat32(g, x, (v) => {
    const c = (value: number): string => g.floatConstant([value], [], 'float32');
    const cube = g.op('Mul', [g.op('Mul', [v, v]), v]);
    const inner = g.op('Mul', [g.op('Add', [v, g.op('Mul', [cube, c(0.044715)])]), c(Math.sqrt(2 / Math.PI))]);
    return g.op('Mul', [g.op('Mul', [v, c(0.5)]), g.op('Add', [g.op('Tanh', [inner]), c(1)])]);
  });
}

/** A value the architecture file must have supplied. */
export function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new ChorusError('CHORUS_INTERNAL', `the architecture gave no ${what}`);
  return value;
}
