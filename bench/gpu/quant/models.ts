/**
 * The kernel benchmark's models: `copies` projections of one shape side by side, each with weights of
 * its own (so that a run reads them all from memory, not from L2), all reading the input x [M, K] and
 * each its own output: fp16 MatMul (ONNX Runtime), the addon's Linear, ONNX Runtime's MatMulNBits and
 * the addon's QuantLinear. Weights are initializers, as a built model has them (MatMulNBits prepacks).
 */
import { randomFillSync } from 'node:crypto';
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;
const T = onnx.TensorProto.DataType;

export type Op = 'MatMul' | 'Linear' | 'MatMulNBits' | 'QuantLinear';

export interface Variant {
  name: string;
  op: Op;
  bits?: 4 | 8;
  /** QuantLinear's decode kernel to try first at up to 8 rows (CHORUS_QUANT_GEMV; default: the wide one where it takes the product). */
  gemv?: 'plain' | 'mma' | 'wide';
  /** More environment for its runs (QuantLinear's CHORUS_QUANT_TILES, CHORUS_QUANT_TILE_WARPS). */
  env?: Record<string, string>;
  /** The row counts it is timed at (default: all of the benchmark's). */
  rows?: number[];
  /** QuantLinear as a built decoder's: with a pre-norm folded in (a residual input and a norm's weights; the sum written). */
  norm?: boolean;
  /** Gated (silu): the shape's N weight rows are the gates' then the up rows', N / 2 outputs. */
  gated?: boolean;
  /** As `chorus build --weights int8` writes them: blocks of 256 (each row's one scale repeated) rather than of BLOCK_SIZE. */
  channel?: boolean;
}

export const BLOCK_SIZE = 128;

/** Random float16 bits of moderate values (|v| < 2^-6), none of them NaN or infinite. */
function halves(count: number): Uint8Array {
  const bits = new Uint16Array(count);
  randomFillSync(bits);
  for (let i = 0; i < count; i++) bits[i] = (bits[i]! & 0x83ff) | 0x2000;
  return new Uint8Array(bits.buffer);
}

/** The weights of one copy, made once per shape and variant kind (shared by every copy's initializer). */
export interface Weights {
  weight: Uint8Array;
  scales?: Uint8Array;
  blocks?: number;
}

/** A variant's block size: a build's 256 for its int8 weights of one scale a row, else BLOCK_SIZE. */
export function blockSize(v: Variant): number {
  return v.channel === true ? 256 : BLOCK_SIZE;
}

export function makeWeights(v: Variant, K: number, N: number): Weights {
  if (v.bits === undefined) return { weight: halves(K * N) };
  const blocks = Math.ceil(K / blockSize(v));
  const weight = new Uint8Array(N * blocks * ((blockSize(v) * v.bits) / 8));
  randomFillSync(weight);
  return { weight, scales: halves(N * blocks), blocks };
}

/** A projection's outputs for N weight rows: N, or gated, N / 2. */
function outputsOf(N: number, v?: Variant): number {
  return v?.gated === true ? N / 2 : N;
}

/** Bytes a projection reads and writes: its weights (and scales), x and y. */
export function trafficBytes(w: Weights, M: number, K: number, N: number, v?: Variant): number {
  return w.weight.byteLength + (w.scales?.byteLength ?? 0) + 2 * M * K + 2 * M * outputsOf(N, v);
}

/** The model's bytes: `copies` nodes of variant v, outputs y0..y{copies-1}. */
export function modelBytes(v: Variant, w: Weights, K: number, N: number, copies: number): Uint8Array {
  const initializer: onnxProto.onnx.ITensorProto[] = [];
  const node: onnxProto.onnx.INodeProto[] = [];
  const output: onnxProto.onnx.IValueInfoProto[] = [];
  const int = (name: string, i: number): onnxProto.onnx.IAttributeProto => ({ name, type: onnx.AttributeProto.AttributeType.INT, i });
  for (let c = 0; c < copies; c++) {
    const y = `y${c}`;
    if (v.bits === undefined) {
      const dims = v.op === 'MatMul' ? [K, N] : [N, K];
      initializer.push({ name: `w${c}`, dims, dataType: T.FLOAT16, rawData: w.weight });
      node.push({ opType: v.op, input: ['x', `w${c}`], output: [y], name: `n${c}`, ...(v.op === 'Linear' ? { domain: 'chorus' } : {}) });
    } else {
      initializer.push({ name: `b${c}`, dims: [N, w.blocks!, (blockSize(v) * v.bits) / 8], dataType: T.UINT8, rawData: w.weight });
      initializer.push({ name: `s${c}`, dims: [N, w.blocks!], dataType: T.FLOAT16, rawData: w.scales! });
      const fused = v.norm === true ? ['', '', '', 'r', 'g'] : [];
      const attribute = [int('K', K), int('N', N), int('bits', v.bits), int('block_size', blockSize(v))];
      if (v.gated === true) attribute.push(int('gated', 1), { name: 'activation', type: onnx.AttributeProto.AttributeType.STRING, s: new TextEncoder().encode('silu') });
      node.push({
        opType: v.op,
        domain: v.op === 'QuantLinear' ? 'chorus' : 'com.microsoft',
        input: ['x', `b${c}`, `s${c}`, ...fused],
        output: v.norm === true ? [y, `sum${c}`] : [y],
        name: `n${c}`,
        attribute,
      });
      if (v.norm === true) output.push({ name: `sum${c}`, type: { tensorType: { elemType: T.FLOAT16, shape: { dim: [{ dimParam: 'M' }, { dimValue: K }] } } } });
    }
    output.push({ name: y, type: { tensorType: { elemType: T.FLOAT16, shape: { dim: [{ dimParam: 'M' }, { dimValue: outputsOf(N, v) }] } } } });
  }
  const input = [{ name: 'x', type: { tensorType: { elemType: T.FLOAT16, shape: { dim: [{ dimParam: 'M' }, { dimValue: K }] } } } }];
  if (v.norm === true) {
    input.push({ name: 'r', type: { tensorType: { elemType: T.FLOAT16, shape: { dim: [{ dimParam: 'M' }, { dimValue: K }] } } } });
    initializer.push({ name: 'g', dims: [K], dataType: T.FLOAT16, rawData: halves(K) });
  }
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName: 'chorus-bench',
    opsetImport: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
      { domain: 'chorus', version: 1 },
    ],
    graph: { name: 'kernels', node, initializer, input, output },
  });
  return onnx.ModelProto.encode(model).finish();
}

/** x [M, K] as float16 bits. */
export function activations(M: number, K: number): Uint8Array {
  return halves(M * K);
}
