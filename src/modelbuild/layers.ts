/** Building blocks shared by the decoder-only and encoder-decoder graphs. */
import { ChorusError } from '../errors.ts';
import type { Linear, Norm } from './decoder-spec.ts';
import { float, type GraphBuilder } from './graph.ts';

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
