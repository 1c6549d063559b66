/**
 * Tensor data types as ggml numbers them, and their encodings: F32, F16 (IEEE half, round to nearest
 * even) and Q8_0 (each run of 32 values along a row: an fp16 scale d = max|x| / 127, then 32 int8
 * q = round(x / d)).
 */
import { ChorusError } from '../../errors.ts';
import { toHalfBits } from '../../util/half.ts';

export const GgmlType = { F32: 0, F16: 1, Q8_0: 8 } as const;
export type GgmlType = (typeof GgmlType)[keyof typeof GgmlType];

/** Values per Q8_0 block, and the block's bytes (fp16 scale + 32 int8). */
export const Q8_0_BLOCK = 32;
const Q8_0_BYTES = 2 + Q8_0_BLOCK;

/** The bytes of a tensor of shape `dims` (outermost first) in `type`. */
export function tensorBytes(dims: readonly number[], type: GgmlType): number {
  const count = dims.reduce((a, b) => a * b, 1);
  switch (type) {
    case GgmlType.F32:
      return count * 4;
    case GgmlType.F16:
      return count * 2;
    case GgmlType.Q8_0: {
      const row = dims[dims.length - 1]!;
      if (row % Q8_0_BLOCK !== 0) throw new ChorusError('CHORUS_INTERNAL', `Q8_0 needs rows that are a multiple of ${Q8_0_BLOCK} values, got ${row}`);
      return (count / Q8_0_BLOCK) * Q8_0_BYTES;
    }
  }
}

/** `values` (row-major, shape `dims`) encoded as `type`. */
export function encodeTensor(values: Float32Array, dims: readonly number[], type: GgmlType): Uint8Array {
  switch (type) {
    case GgmlType.F32:
      return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    case GgmlType.F16:
      return new Uint8Array(halves(values).buffer);
    case GgmlType.Q8_0:
      return quantizeQ8_0(values, tensorBytes(dims, type));
  }
}

/**
 * float32 -> IEEE half bits, round to nearest even, for whole arrays (a 7B model is 7e9 values): normal
 * results by integer arithmetic on the bits, the rare rest (subnormal, overflow, NaN) by `toHalfBits`.
 */
function halves(values: Float32Array): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < bits.length; i++) {
    const x = bits[i]!;
    const exponent = (x >>> 23) & 0xff;
    if (exponent > 112 && exponent < 143) {
      const rest = x & 0x1fff;
      const half = ((x >>> 16) & 0x8000) | ((exponent - 112) << 10) | ((x >>> 13) & 0x3ff);
      out[i] = half + (rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1) ? 1 : 0);
    } else {
      out[i] = toHalfBits(values[i]!);
    }
  }
  return out;
}

function quantizeQ8_0(values: Float32Array, bytes: number): Uint8Array {
  const out = Buffer.alloc(bytes);
  for (let block = 0; block * Q8_0_BLOCK < values.length; block++) {
    const start = block * Q8_0_BLOCK;
    let amax = 0;
    for (let i = 0; i < Q8_0_BLOCK; i++) amax = Math.max(amax, Math.abs(values[start + i]!));
    const d = amax / 127;
    const inverse = d === 0 ? 0 : 1 / d;
    const at = block * Q8_0_BYTES;
    out.writeUInt16LE(toHalfBits(d), at);
    for (let i = 0; i < Q8_0_BLOCK; i++) {
      const x = values[start + i]! * inverse;
      out.writeInt8(Math.sign(x) * Math.round(Math.abs(x)), at + 2 + i); // halves away from zero, as C's roundf
    }
  }
  return out;
}
