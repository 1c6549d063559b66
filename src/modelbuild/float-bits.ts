/**
 * Converting whole arrays between the float formats a build reads (safetensors F32, F16, BF16) and
 * the ones it writes (ONNX float32, float16, bfloat16), in tight loops over the bits: a 7B model is
 * billions of values. bfloat16 to float32 and back is exact, so a bf16 checkpoint built in bf16 keeps
 * its bits; where the formats match, bytes are copied as they are.
 */
import { halfBitsOfFloatBits, widenHalf } from '../util/half.ts';

/** The float element types of a built model. */
export type FloatType = 'float32' | 'float16' | 'bfloat16';

/** The safetensors dtypes a checkpoint may store its weights in. */
export const READABLE_DTYPES = ['F32', 'F16', 'BF16'] as const;
export type ReadableDtype = (typeof READABLE_DTYPES)[number];

/** Bytes per element. */
export const FLOAT_WIDTH: Record<FloatType | ReadableDtype, number> = { float32: 4, float16: 2, bfloat16: 2, F32: 4, F16: 2, BF16: 2 };

const SAME: Record<ReadableDtype, FloatType> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

/** True when `dtype` is stored exactly as `type` is (no conversion needed). */
export function sameFormat(dtype: string, type: FloatType): boolean {
  return SAME[dtype as ReadableDtype] === type;
}

/** Raw little-endian values in `dtype` as float32 (exact for every readable dtype). */
export function decodeRaw(raw: Uint8Array, dtype: ReadableDtype): Float32Array {
  const count = raw.byteLength / FLOAT_WIDTH[dtype];
  const aligned = raw.byteOffset % 4 === 0 ? raw : raw.slice();
  if (dtype === 'F32') return new Float32Array(aligned.buffer, aligned.byteOffset, count);
  const bits = new Uint16Array(aligned.buffer, aligned.byteOffset, count);
  if (dtype === 'F16') return widenHalf(bits);
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i++) out[i] = bits[i]! << 16;
  return new Float32Array(out.buffer);
}

/** float32 values as raw bytes of `type`: float16 and bfloat16 rounded to nearest even. */
export function encodeFloats(values: Float32Array, type: FloatType): Uint8Array {
  if (type === 'float32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  if (type === 'bfloat16') {
    for (let i = 0; i < bits.length; i++) {
      const x = bits[i]!;
      out[i] = (x & 0x7fffffff) > 0x7f800000 ? ((x >>> 16) | 0x40) : (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
    }
  } else {
    for (let i = 0; i < bits.length; i++) out[i] = halfBitsOfFloatBits(bits[i]!);
  }
  return new Uint8Array(out.buffer);
}

/** Raw values in `dtype` as raw values of `type`, copied when the formats match. */
export function convertRaw(raw: Uint8Array, dtype: ReadableDtype, type: FloatType): Uint8Array {
  if (sameFormat(dtype, type)) return raw;
  if (dtype === 'BF16' && type === 'float16') {
    // The common case (a bf16 checkpoint built in fp16), without a float32 copy in between.
    const aligned = raw.byteOffset % 2 === 0 ? raw : raw.slice();
    const bits = new Uint16Array(aligned.buffer, aligned.byteOffset, raw.byteLength / 2);
    const out = new Uint16Array(bits.length);
    for (let i = 0; i < bits.length; i++) out[i] = halfBitsOfFloatBits(bits[i]! << 16);
    return new Uint8Array(out.buffer);
  }
  return encodeFloats(decodeRaw(raw, dtype), type);
}

/** The transpose of a [rows, cols] matrix of `width`-byte elements, in its raw bytes. */
export function transposeRaw(raw: Uint8Array, rows: number, cols: number, width: number): Uint8Array {
  const out = new Uint8Array(raw.byteLength);
  const aligned = raw.byteOffset % 4 === 0 ? raw : raw.slice();
  if (width === 4) transposeInto(new Uint32Array(aligned.buffer, aligned.byteOffset, rows * cols), new Uint32Array(out.buffer), rows, cols);
  else transposeInto(new Uint16Array(aligned.buffer, aligned.byteOffset, rows * cols), new Uint16Array(out.buffer), rows, cols);
  return out;
}

/** `out` = the transpose of `src` [rows, cols], in blocks that stay in the cache. */
export function transposeInto<T extends Uint16Array | Uint32Array | Float32Array>(src: T, out: T, rows: number, cols: number): void {
  const block = 64;
  for (let r0 = 0; r0 < rows; r0 += block) {
    const r1 = Math.min(r0 + block, rows);
    for (let c0 = 0; c0 < cols; c0 += block) {
      const c1 = Math.min(c0 + block, cols);
      for (let r = r0; r < r1; r++) {
        const row = r * cols;
        for (let c = c0; c < c1; c++) out[c * rows + r] = src[row + c]!;
      }
    }
  }
}

