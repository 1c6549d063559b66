/** Building blocks shared by the decoder-only and encoder-decoder graphs. */
import { ChorusError } from '../errors.ts';
import type { Linear, Norm } from './decoder-spec.ts';
import { float, type GraphBuilder } from './graph.ts';

/** float32's lowest value: the additive bias of a position that may not be attended. */
export const FLOAT32_MIN = -3.4028234663852886e38;

/** A float32 additive bias from a boolean tensor: 0 where `allowed`, float32's minimum elsewhere. */
export function additiveMask(g: GraphBuilder, allowed: string, name?: string): string {
  return g.op('Where', [allowed, g.floatConstant([0], [], 'float32'), g.floatConstant([FLOAT32_MIN], [], 'float32')], {}, name === undefined ? {} : { name });
}

/**
 * Attention probabilities from raw scores: scaled (when `scale` is not 1), plus the float32 `bias`,
 * softmax over the last axis, all in float32 as transformers does for half-precision models; returned
 * in the build's float type.
 */
export function maskedSoftmax(g: GraphBuilder, scores: string, scale: number, bias: string): string {
  const half = g.floatType === 'float16';
  let x = half ? g.op('Cast', [scores], { to: 1 }) : scores;
  if (scale !== 1) x = g.op('Mul', [x, g.floatConstant([scale], [], 'float32')]);
  const probs = g.op('Softmax', [g.op('Add', [x, bias])], { axis: -1 });
  return half ? g.op('Cast', [probs], { to: 10 }) : probs;
}

/** Which norm, and its epsilon. */
export interface NormKind {
  norm: 'layernorm' | 'rmsnorm';
  normEps: number;
}

/** `x @ weight (+ bias)`; the weights are named `<name>.weight` and `<name>.bias`. */
export function linear(g: GraphBuilder, w: Linear, x: string, name: string): string {
  const y = g.op('MatMul', [x, g.weight(`${name}.weight`, w.weight)]);
  return w.bias === undefined ? y : g.op('Add', [y, g.weight(`${name}.bias`, w.bias)]);
}

/** LayerNorm, or RMSNorm computed in float32 as transformers does (T5LayerNorm is the same). */
export function norm(g: GraphBuilder, spec: NormKind, w: Norm, x: string, name: string): string {
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

/** GPT-2's and T5 v1.1's gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
export function geluTanh(g: GraphBuilder, x: string): string {
  const cube = g.op('Mul', [g.op('Mul', [x, x]), x]);
  const inner = g.op('Mul', [g.op('Add', [x, g.op('Mul', [cube, g.floatConstant([0.044715], [])])]), g.floatConstant([Math.sqrt(2 / Math.PI)], [])]);
  return g.op('Mul', [g.op('Mul', [x, g.floatConstant([0.5], [])]), g.op('Add', [g.op('Tanh', [inner]), g.floatConstant([1], [])])]);
}

/** A value the architecture file must have supplied. */
export function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new ChorusError('CHORUS_INTERNAL', `the architecture gave no ${what}`);
  return value;
}
