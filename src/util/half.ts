/** Conversions between float32 and the 16-bit float formats (IEEE half, bfloat16). */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> IEEE half (round to nearest even), as bits. */
export function toHalfBits(value: number): number {
  f32[0] = value;
  return halfBitsOfFloatBits(u32[0]!);
}

/** float32 bits (a Uint32Array's element) -> IEEE half bits, round to nearest even. */
export function halfBitsOfFloatBits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  let mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa !== 0 ? 0x200 : 0);
  const e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    let half = mantissa >>> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  // A carry out of the mantissa rounds up into the exponent, and from the largest finite value to infinity.
  let half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

/** IEEE half bits -> float32 value. */
export function fromHalfBits(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa === 0 ? sign * Infinity : Number.NaN;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

let halfTable: Float32Array | undefined;

/**
 * Widens IEEE half bits to float32 through a table of all 65,536 values (built once, 256 KiB): a
 * vocabulary of fp16 logits per row per step is on the engine's hot path.
 */
export function widenHalf(bits: Uint16Array, out: Float32Array = new Float32Array(bits.length), offset = 0): Float32Array {
  if (halfTable === undefined) {
    halfTable = new Float32Array(65536);
    for (let b = 0; b < 65536; b++) halfTable[b] = fromHalfBits(b);
  }
  const table = halfTable;
  for (let i = 0; i < bits.length; i++) out[offset + i] = table[bits[i]!]!;
  return out;
}

/** A float tensor's values as float32: float16 data widened through the table, float32 data as it is. */
export function floatData(tensor: { type: string; data: unknown }): Float32Array {
  return tensor.type === 'float16' ? widenHalf(tensor.data as Uint16Array) : (tensor.data as Float32Array);
}

/** bfloat16 bits -> float32 value (exact: bf16 is float32's top half). */
export function fromBfloat16Bits(bits: number): number {
  u32[0] = bits << 16;
  return f32[0]!;
}
