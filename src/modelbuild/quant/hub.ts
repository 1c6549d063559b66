/**
 * GPTQ and AWQ checkpoints as the hub stores them (`quantization_config` in config.json), repacked
 * into the MatMulNBits layout with their zero points. GPTQ (checkpoint_format gptq): qweight int32
 * [K/8, N] packed along K, qzeros int32 [K/g, N/8] packed along N and stored minus one, scales [K/g, N],
 * g_idx [K] (act-order: the input is gathered so each group's rows sit together). AWQ (version gemm):
 * qweight int32 [K, N/8] packed along N in the order 0 2 4 6 1 3 5 7, qzeros the same without the minus
 * one, scales [K/g, N]. Anything else is refused by name. Each projection becomes a `<name>.weight`
 * tensor [N, K] (nn.Linear's, so architectures take it as they take float weights) whose values are
 * the dequantized ones, linked to its packed form, which the build writes instead.
 */
import { ChorusError } from '../../errors.ts';
import { Checkpoint, type ModelConfig } from '../checkpoint.ts';
import type { Tensor } from '../tensor.ts';
import { BLOCK_SIZES, blockCount, dequantizeRows, putValue, putZeroPoint, zeroPointRowBytes, type PackedWeight, type QuantizedLinear } from './nbits.ts';

/** A hub checkpoint's quantization, as read from config.json. */
export interface HubQuantization {
  method: 'gptq' | 'awq';
  bits: 4;
  /** Values per scale; -1: one group over all of K (GPTQ). */
  groupSize: number;
}

function refuse(what: string, param: string, value: unknown): ChorusError {
  return new ChorusError('CHORUS_UNSUPPORTED', `config.json: quantization_config ${what}; supported: quant_method gptq (bits 4, checkpoint_format gptq) and awq (bits 4, version gemm, zero_point true)`, { param, value });
}

/** The checkpoint's `quantization_config`, checked; undefined for a float checkpoint. */
export function hubQuantization(config: ModelConfig): HubQuantization | undefined {
  const q = config.quantization_config as Record<string, unknown> | undefined | null;
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object') throw refuse('is not an object', 'quantization_config', q);
  const method = String(q.quant_method ?? '').toLowerCase();
  if (method !== 'gptq' && method !== 'awq') throw refuse(`quant_method ${String(q.quant_method)} is not supported`, 'quant_method', q.quant_method);
  if (q.bits !== 4) throw refuse(`${method} bits ${String(q.bits)} is not supported`, 'bits', q.bits);
  const groupSize = q.group_size;
  if (typeof groupSize !== 'number' || !Number.isInteger(groupSize) || !(groupSize === -1 || (groupSize >= 16 && (groupSize & (groupSize - 1)) === 0))) {
    throw refuse(`${method} group_size ${String(groupSize)} is not supported (a power of two from 16, or -1)`, 'group_size', groupSize);
  }
  if (method === 'gptq') {
    const format = String(q.checkpoint_format ?? 'gptq').toLowerCase();
    if (format !== 'gptq') throw refuse(`gptq checkpoint_format ${format} is not supported`, 'checkpoint_format', q.checkpoint_format);
    if (q.is_marlin_format === true) throw refuse('gptq is_marlin_format (Marlin packing) is not supported', 'is_marlin_format', true);
  } else {
    const version = String(q.version ?? 'gemm').toLowerCase();
    if (version !== 'gemm') throw refuse(`awq version ${String(q.version)} is not supported`, 'version', q.version);
    if (q.zero_point === false) throw refuse('awq zero_point false is not supported', 'zero_point', false);
    if (groupSize === -1) throw refuse('awq group_size -1 is not supported', 'group_size', groupSize);
  }
  return { method, bits: 4, groupSize };
}

/** The packed form behind each dequantized `<name>.weight` tensor of a prequantized checkpoint. */
const packedOf = new WeakMap<Tensor, QuantizedLinear>();

/** The quantized projection `tensor` (or the tensor it is a transposed view of) stands for, if any. */
export function prequantizedOf(tensor: Tensor): QuantizedLinear | undefined {
  return packedOf.get(tensor) ?? (tensor.origin === undefined ? undefined : packedOf.get(tensor.origin));
}

/** The checkpoint with each quantized projection's tensors replaced by its `<name>.weight`; and how many there are. */
export function prequantizedCheckpoint(checkpoint: Checkpoint, q: HubQuantization): { checkpoint: Checkpoint; projections: number } {
  const names = checkpoint.names();
  const tensors = new Map<string, Tensor>();
  const parts = new Set<string>();
  let projections = 0;
  for (const name of names) {
    if (!name.endsWith('.qweight')) continue;
    const prefix = name.slice(0, -'.qweight'.length);
    const own = (suffix: string, required: boolean): Tensor | undefined => {
      const full = `${prefix}.${suffix}`;
      if (!checkpoint.has(full)) {
        if (required) throw new ChorusError('CHORUS_FILE_INVALID', `${checkpoint.source}: ${q.method} tensor ${full} is missing beside ${name}`, { param: full });
        return undefined;
      }
      parts.add(full);
      return checkpoint.peek(full);
    };
    const tensor = repacked(q, prefix, own('qweight', true)!, own('qzeros', true)!, own('scales', true)!, q.method === 'gptq' ? own('g_idx', false) : undefined);
    tensors.set(`${prefix}.weight`, tensor);
    projections++;
  }
  for (const name of names) if (!parts.has(name)) tensors.set(name, checkpoint.peek(name));
  return { checkpoint: new Checkpoint(checkpoint.source, checkpoint.config, tensors), projections };
}

function int32s(tensor: Tensor, name: string): Int32Array {
  if (tensor.dtype !== 'I32' || tensor.raw === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${name} is stored as ${String(tensor.dtype)}; GPTQ and AWQ store it as I32`, { param: name });
  const bytes = tensor.raw();
  return new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

/** The repacking of one projection, done when its values are written (one at a time, kept until its scales are). */
let last: { key: object; value: PackedWeight } | undefined;

function repacked(q: HubQuantization, prefix: string, qweight: Tensor, qzeros: Tensor, scales: Tensor, gIdx: Tensor | undefined): Tensor {
  const gptq = q.method === 'gptq';
  const [rows, cols] = qweight.dims as [number, number];
  const k = gptq ? rows * 8 : rows;
  const n = gptq ? cols : cols * 8;
  const group = q.groupSize === -1 ? k : q.groupSize;
  const groups = Math.ceil(k / group);
  const expect = (t: Tensor, dims: number[], what: string): void => {
    if (t.dims.length !== dims.length || t.dims.some((d, i) => d !== dims[i])) throw new ChorusError('CHORUS_FILE_INVALID', `${prefix}.${what} has shape [${t.dims.join(', ')}], expected [${dims.join(', ')}] for ${q.method} K ${k}, N ${n}, group_size ${q.groupSize}`, { param: `${prefix}.${what}` });
  };
  expect(scales, [groups, n], 'scales');
  expect(qzeros, [groups, n / 8], 'qzeros');
  if (gIdx !== undefined) expect(gIdx, [k], 'g_idx');
  const blockSize = Math.min(group, BLOCK_SIZES.at(-1)!);
  const perm = gIdx === undefined ? undefined : actOrder(int32s(gIdx, `${prefix}.g_idx`), group, prefix);
  const key = {};
  const values = (): PackedWeight => {
    if (last?.key !== key) last = { key, value: repack(gptq, int32s(qweight, `${prefix}.qweight`), int32s(qzeros, `${prefix}.qzeros`), scales.data, k, n, group, blockSize, perm) };
    return last.value;
  };
  const blocks = blockCount(k, blockSize);
  const packed: QuantizedLinear = {
    method: q.method,
    k,
    n,
    bits: 4,
    blockSize,
    packed: { dims: [n, blocks, blockSize / 2], bytes: () => values().packed },
    scales: {
      dims: [n, blocks],
      get data() {
        return values().scales;
      },
    },
    zeroPoints: { dims: [n, zeroPointRowBytes(4, blocks)], bytes: () => values().zeroPoints! },
    ...(perm === undefined ? {} : { perm }),
  };
  const tensor: Tensor = {
    dims: [n, k],
    get data() {
      const sorted = dequantizeRows(values(), n, k, 4, blockSize);
      if (perm === undefined) return sorted;
      const out = new Float32Array(n * k);
      for (let o = 0; o < n; o++) for (let i = 0; i < k; i++) out[o * k + perm[i]!] = sorted[o * k + i]!;
      return out;
    },
  };
  packedOf.set(tensor, packed);
  return tensor;
}

/**
 * GPTQ's g_idx: undefined when it is the plain order (row k in group k / g); otherwise the order that
 * sorts rows by group (act-order), which must put exactly g rows in each group.
 */
function actOrder(gIdx: Int32Array, group: number, prefix: string): Int32Array | undefined {
  if (gIdx.every((g, k) => g === Math.floor(k / group))) return undefined;
  const perm = Int32Array.from(gIdx.keys()).sort((a, b) => gIdx[a]! - gIdx[b]! || a - b);
  if (!perm.every((k, i) => gIdx[k] === Math.floor(i / group))) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${prefix}.g_idx puts other than group_size ${group} rows in some group; act-order checkpoints whose groups are all full are supported`, { param: `${prefix}.g_idx` });
  }
  return perm;
}

/** AWQ's nibble of each of 8 packed columns: column c sits at nibble AWQ_NIBBLE[c]. */
const AWQ_NIBBLE = [0, 4, 1, 5, 2, 6, 3, 7];

function repack(gptq: boolean, qweight: Int32Array, qzeros: Int32Array, scales: Float32Array, k: number, n: number, group: number, blockSize: number, perm: Int32Array | undefined): PackedWeight {
  const blocks = blockCount(k, blockSize);
  const blob = blockSize / 2;
  const zeroRow = zeroPointRowBytes(4, blocks);
  const packed = new Uint8Array(n * blocks * blob);
  const outScales = new Float32Array(n * blocks);
  const zeroPoints = new Uint8Array(n * zeroRow);
  const nibble = (word: number, at: number): number => (word >>> (at * 4)) & 15;
  for (let o = 0; o < n; o++) {
    const zeroNibble = gptq ? o & 7 : AWQ_NIBBLE[o & 7]!;
    for (let b = 0; b < blocks; b++) {
      const g = Math.floor((b * blockSize) / group);
      const stored = nibble(qzeros[g * (n / 8) + (o >> 3)]!, zeroNibble);
      putZeroPoint(zeroPoints, o * zeroRow, b, gptq ? (stored + 1) & 15 : stored, 4);
      outScales[o * blocks + b] = scales[g * n + o]!;
    }
    for (let i = 0; i < k; i++) {
      const row = perm === undefined ? i : perm[i]!;
      const value = gptq ? nibble(qweight[(row >> 3) * n + o]!, row & 7) : nibble(qweight[row * (n / 8) + (o >> 3)]!, AWQ_NIBBLE[o & 7]!);
      putValue(packed, (o * blocks + Math.floor(i / blockSize)) * blob, i % blockSize, value, 4);
    }
  }
  return { packed, scales: outScales, zeroPoints };
}
