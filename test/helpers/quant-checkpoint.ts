/**
 * GPTQ and AWQ checkpoints written from a float checkpoint by a packer of their own (the formats as
 * AutoGPTQ and AutoAWQ store them), each beside its dequantized float twin: every projection
 * quantized to 4 bits (asymmetric, groups of `groupSize`, scales rounded to fp16), GPTQ optionally in
 * act-order (rows assigned to groups through a seeded permutation, g_idx saying which).
 */
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { readSafetensors, writeSafetensors, type Tensor } from '../../src/modelbuild/index.ts';
import { decodeRaw, encodeFloats } from '../../src/modelbuild/float-bits.ts';

export interface QuantFixture {
  format: 'gptq' | 'awq';
  groupSize: number;
  actOrder?: boolean;
  /** Extra quantization_config fields (to write refused variants). */
  config?: Record<string, unknown>;
}

interface Stored {
  dtype: 'I32' | 'F16' | 'F32';
  dims: number[];
  bytes: Uint8Array;
}

/** Writes `tensors` as safetensors, each in its own dtype. */
function writeMixed(file: string, tensors: Map<string, Stored>): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let offset = 0;
  const names = [...tensors.keys()].sort();
  for (const name of names) {
    const t = tensors.get(name)!;
    header[name] = { dtype: t.dtype, shape: t.dims, data_offsets: [offset, offset + t.bytes.byteLength] };
    offset += t.bytes.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);
  const fd = openSync(file, 'w');
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, length);
  writeSync(fd, Buffer.from(json));
  for (const name of names) writeSync(fd, tensors.get(name)!.bytes);
  closeSync(fd);
}

const PROJECTIONS = /\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$/;
const AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7];

/** Writes `<out>` (the quantized checkpoint) and `<out>/dequantized` (its float twin) from `source`. */
export function writeQuantFixture(source: string, out: string, fixture: QuantFixture): void {
  const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, unknown>;
  const float = readSafetensors(join(source, 'model.safetensors'));
  const quantized = new Map<string, Stored>();
  const twin = new Map<string, Tensor>();
  let seed = 7;
  const random = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  for (const [name, tensor] of float) {
    const data = tensor.data;
    if (!PROJECTIONS.test(name)) {
      quantized.set(name, { dtype: 'F32', dims: tensor.dims, bytes: encodeFloats(data, 'float32') });
      twin.set(name, { dims: tensor.dims, data });
      continue;
    }
    const [n, k] = tensor.dims as [number, number];
    const g = fixture.groupSize;
    const groups = k / g;
    // Which group each input row belongs to: in order, or (act-order) through a permutation.
    const order = Int32Array.from({ length: k }, (_, i) => i);
    if (fixture.actOrder) {
      for (let i = k - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [order[i], order[j]] = [order[j]!, order[i]!];
      }
    }
    const gIdx = new Int32Array(k);
    order.forEach((row, i) => (gIdx[row] = Math.floor(i / g)));
    const q = new Uint8Array(n * k);
    const zeros = new Uint8Array(groups * n);
    const scales = new Float32Array(groups * n);
    for (let o = 0; o < n; o++) {
      for (let grp = 0; grp < groups; grp++) {
        const rows = Array.from(order.subarray(grp * g, (grp + 1) * g));
        const values = rows.map((r) => data[o * k + r]!);
        const lo = Math.min(0, ...values);
        const hi = Math.max(0, ...values);
        const scale = decodeRaw(encodeFloats(Float32Array.of((hi - lo) / 15 || 1), 'float16'), 'F16')[0]!;
        const zero = Math.min(15, Math.max(0, Math.round(-lo / scale)));
        scales[grp * n + o] = scale;
        zeros[grp * n + o] = zero;
        for (const r of rows) q[o * k + r] = Math.min(15, Math.max(0, Math.round(data[o * k + r]! / scale) + zero));
      }
    }
    const deq = new Float32Array(n * k);
    for (let o = 0; o < n; o++) for (let r = 0; r < k; r++) deq[o * k + r] = (q[o * k + r]! - zeros[gIdx[r]! * n + o]!) * scales[gIdx[r]! * n + o]!;
    twin.set(name, { dims: [n, k], data: deq });
    const prefix = name.slice(0, -'.weight'.length);
    const ints = (values: Int32Array, dims: number[]): Stored => ({ dtype: 'I32', dims, bytes: new Uint8Array(values.buffer) });
    const qweight = fixture.format === 'gptq' ? new Int32Array((k / 8) * n) : new Int32Array(k * (n / 8));
    const qzeros = new Int32Array(groups * (n / 8));
    for (let o = 0; o < n; o++) {
      for (let r = 0; r < k; r++) {
        const v = q[o * k + r]!;
        if (fixture.format === 'gptq') qweight[(r >> 3) * n + o]! |= v << ((r & 7) * 4);
        else qweight[r * (n / 8) + (o >> 3)]! |= v << (AWQ_ORDER.indexOf(o & 7) * 4);
      }
      for (let grp = 0; grp < groups; grp++) {
        const z = fixture.format === 'gptq' ? (zeros[grp * n + o]! - 1) & 15 : zeros[grp * n + o]!;
        qzeros[grp * (n / 8) + (o >> 3)]! |= z << ((fixture.format === 'gptq' ? o & 7 : AWQ_ORDER.indexOf(o & 7)) * 4);
      }
    }
    quantized.set(`${prefix}.qweight`, ints(qweight, fixture.format === 'gptq' ? [k / 8, n] : [k, n / 8]));
    quantized.set(`${prefix}.qzeros`, ints(qzeros, [groups, n / 8]));
    quantized.set(`${prefix}.scales`, { dtype: 'F16', dims: [groups, n], bytes: encodeFloats(scales, 'float16') });
    if (fixture.format === 'gptq') quantized.set(`${prefix}.g_idx`, ints(gIdx, [k]));
  }
  const quantizationConfig =
    fixture.format === 'gptq'
      ? { quant_method: 'gptq', bits: 4, group_size: fixture.groupSize, desc_act: fixture.actOrder === true, sym: false, checkpoint_format: 'gptq', ...fixture.config }
      : { quant_method: 'awq', bits: 4, group_size: fixture.groupSize, zero_point: true, version: 'gemm', ...fixture.config };
  mkdirSync(join(out, 'dequantized'), { recursive: true });
  writeFileSync(join(out, 'config.json'), JSON.stringify({ ...config, quantization_config: quantizationConfig }, null, 2));
  writeMixed(join(out, 'model.safetensors'), quantized);
  writeFileSync(join(out, 'dequantized', 'config.json'), JSON.stringify(config, null, 2));
  writeSafetensors(join(out, 'dequantized', 'model.safetensors'), twin);
}
