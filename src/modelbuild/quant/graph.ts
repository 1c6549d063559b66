/**
 * Quantized projections inside the graphs. A quantized weight registers its parts (B, scales, zero
 * points) as initializers and is known to the graph by a handle named as a float weight would be, so
 * the layers pass it around as they pass float weights (q, k and v concatenated, say) and
 * `quantizedMatMul` is the one place that chooses the operator.
 */
import { ChorusError } from '../../errors.ts';
import type { GraphBuilder } from '../graph.ts';
import type { LinearActivation } from '../layers.ts';
import { quantLinear } from '../quant-linear-addon.ts';
import type { QuantizedLinear } from './nbits.ts';

/** A quantized weight inside one graph: its initializers' (or concatenations') names and its attributes. */
export interface QuantizedValue {
  packed: string;
  scales: string;
  zeroPoints?: string | undefined;
  /** int64 [K]: the input's columns in B's row order (GPTQ act-order). */
  perm?: { name: string; values: Int32Array } | undefined;
  k: number;
  n: number;
  bits: 4 | 8;
  blockSize: number;
}

const handles = new WeakMap<GraphBuilder, Map<string, QuantizedValue>>();

function graphHandles(g: GraphBuilder): Map<string, QuantizedValue> {
  let map = handles.get(g);
  if (map === undefined) {
    map = new Map();
    handles.set(g, map);
  }
  return map;
}

/** Registers `q`'s parts as `<name>.weight_packed`, `.weight_scales`, `.weight_zero_points`; returns its handle `<name>.weight`. */
export function quantizedWeight(g: GraphBuilder, name: string, q: QuantizedLinear): string {
  const value: QuantizedValue = {
    packed: g.rawWeight(`${name}.weight_packed`, q.packed),
    scales: g.weight(`${name}.weight_scales`, q.scales),
    zeroPoints: q.zeroPoints === undefined ? undefined : g.rawWeight(`${name}.weight_zero_points`, q.zeroPoints),
    perm: q.perm === undefined ? undefined : { name: g.int64([...q.perm]), values: q.perm },
    k: q.k,
    n: q.n,
    bits: q.bits,
    blockSize: q.blockSize,
  };
  const handle = `${name}.weight`;
  graphHandles(g).set(handle, value);
  return handle;
}

/** The quantized weight behind `weight`, if it is one. */
export function quantizedValue(g: GraphBuilder, weight: string): QuantizedValue | undefined {
  return handles.get(g)?.get(weight);
}

/**
 * Quantized weights side by side along N (q, k and v): their parts concatenated (initializers only,
 * which ONNX Runtime folds when the session loads). They must share K, bits, block size and input order.
 */
export function concatQuantized(g: GraphBuilder, weights: readonly string[], name: string): string {
  const parts = weights.map((w) => quantizedValue(g, w)!);
  const first = parts[0]!;
  if (!quantizedAlike(parts)) throw new ChorusError('CHORUS_UNSUPPORTED', `${name}: the projections packed together are quantized differently (bits, group size, zero points or act-order); they must match`);
  const concat = (values: string[], suffix: string): string => g.op('Concat', values, { axis: 0 }, { name: `${name}_${suffix}` });
  const value: QuantizedValue = {
    ...first,
    packed: concat(parts.map((p) => p.packed), 'packed'),
    scales: concat(parts.map((p) => p.scales), 'scales'),
    zeroPoints: first.zeroPoints === undefined ? undefined : concat(parts.map((p) => p.zeroPoints!), 'zero_points'),
    n: parts.reduce((sum, p) => sum + p.n, 0),
  };
  graphHandles(g).set(name, value);
  return name;
}

/** What decides whether quantized weights can sit side by side along N. */
interface QuantizedLayout {
  k: number;
  bits: number;
  blockSize: number;
  zeroPoints?: unknown;
  perm?: Int32Array | undefined;
}

/** Whether quantized weights can sit side by side along N: the same K, bits, block size, zero points (or none) and input order. */
function alike(parts: readonly QuantizedLayout[]): boolean {
  const first = parts[0]!;
  return parts.every((p) => p.k === first.k && p.bits === first.bits && p.blockSize === first.blockSize && (p.zeroPoints === undefined) === (first.zeroPoints === undefined) && samePerm(p.perm, first.perm));
}

/** Whether quantized weights in a graph can sit side by side along N (see alike). */
function quantizedAlike(parts: readonly QuantizedValue[]): boolean {
  return alike(parts.map((p) => ({ ...p, perm: p.perm?.values })));
}

/** x in B's input order (a GPTQ act-order checkpoint's columns gathered first). */
function inInputOrder(g: GraphBuilder, x: string, w: QuantizedValue): string {
  return w.perm === undefined ? x : g.op('Gather', [x, w.perm.name], { axis: -1 });
}

/** Whether the addon's QuantLinear runs a projection of `bits` in `g` (see quantizedMatMul). */
function takesQuantLinear(g: GraphBuilder, bits: number): boolean {
  return g.addonLinear && (bits === 8 || g.floatType === 'float16');
}

function samePerm(a: Int32Array | undefined, b: Int32Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/**
 * `x @ W (+ bias)` for a quantized W: ONNX Runtime's MatMulNBits (CPU and CUDA kernels). On the CPU,
 * 8-bit weights take int8 activations (accuracy_level 4: its float path for 8 bits is a slow reference
 * loop, 25x fp32's MatMul); 4-bit weights keep float activations (accuracy_level 0), so a GPTQ or AWQ
 * checkpoint computes what its dequantized weights do. CUDA ignores the attribute. In the addon's graphs
 * (the slot and paged decoders), 8-bit projections, and 4-bit ones of float16 activations, go through
 * the addon's QuantLinear instead, with the bias and activation inside: on an H100 its decode GEMV reads
 * int8 weights at 1.2-1.3x the speed of MatMulNBits' (bench/results/quant-kernels-2026-11-25-h100.json)
 * and int4 ones of float16 with float16 arithmetic; on the CPU it takes int8 activations for 8 bits as
 * MatMulNBits does (accuracy_level 4: 2-4x fp32's MatMul a projection, where float activations were
 * slower than it). 4-bit projections of float32 stay with MatMulNBits.
 * The one place that picks the operator of a quantized projection.
 */
export function quantizedMatMul(g: GraphBuilder, x: string, w: QuantizedValue, bias?: string, activation?: QuantizedActivation): string {
  const input = inInputOrder(g, x, w);
  if (takesQuantLinear(g, w.bits)) return quantLinearOf(g, input, w, bias, activation?.name, false);
  const inputs = [input, w.packed, w.scales, w.zeroPoints ?? '', '', bias ?? ''];
  while (inputs.at(-1) === '') inputs.pop();
  const product = g.op('MatMulNBits', inputs, { K: w.k, N: w.n, bits: w.bits, block_size: w.blockSize, accuracy_level: w.bits === 8 ? 4 : 0 }, { domain: 'com.microsoft' });
  return activation === undefined ? product : activation.apply(product);
}

/**
 * Whether a gated MLP's quantized gate and up projections go through one gated QuantLinear
 * (quantizedGatedMatMul): where QuantLinear runs them (see quantizedMatMul) and they are quantized alike.
 */
export function takesQuantizedGated(g: GraphBuilder, gate: QuantizedLinear, up: QuantizedLinear): boolean {
  return gate.n === up.n && alike([gate, up]) && takesQuantLinear(g, gate.bits);
}

/**
 * A gated MLP's `activation(x @ gate + bias) * (x @ up + bias)` for quantized gate and up weights (their
 * handles; see takesQuantizedGated) as one gated QuantLinear: B the gate's rows then the up projection's
 * (concatenated initializers), read in one kernel at a decode step, with the rounding of two
 * projections and a Mul.
 */
export function quantizedGatedMatMul(g: GraphBuilder, x: string, gate: string, up: string, name: string, bias: string | undefined, activation: LinearActivation): string {
  const w = quantizedValue(g, concatQuantized(g, [gate, up], `${name}.gate_up.weight`))!;
  return quantLinearOf(g, inInputOrder(g, x, w), w, bias, activation, true);
}

/** One QuantLinear node of `w` on `input` (already in B's input order); 8 bits take int8 activations on the CPU. */
function quantLinearOf(g: GraphBuilder, input: string, w: QuantizedValue, bias: string | undefined, activation: LinearActivation | undefined, gated: boolean): string {
  const weights = { weight: w.packed, scales: w.scales, ...(w.zeroPoints === undefined ? {} : { zeroPoints: w.zeroPoints }) };
  const fused = { accuracyLevel: w.bits === 8 ? (4 as const) : (0 as const), gated, ...(bias === undefined ? {} : { bias }), ...(activation === undefined ? {} : { activation }) };
  return quantLinear(g, input, weights, { K: w.k, N: w.n, bits: w.bits, blockSize: w.blockSize }, fused);
}

/**
 * An activation after a quantized projection: its name as the addon's Linear takes it (for an operator
 * that applies it inside) and the operators that apply it after MatMulNBits.
 */
export interface QuantizedActivation {
  name: LinearActivation;
  apply: (x: string) => string;
}
