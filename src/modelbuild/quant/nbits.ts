/**
 * Quantized projections in ONNX Runtime's MatMulNBits layout (com.microsoft), the one layout every
 * quantized weight of a build takes: B uint8 [N, blocks, block * bits / 8] (each output channel's K
 * values in blocks of `blockSize`; 4-bit values two to a byte, the even index in the low nibble),
 * scales [N, blocks] in the graph's float type, and optional zero points uint8 ([N, ceil(blocks / 2)]
 * two to a byte for 4 bits, [N, blocks] for 8); absent, the zero point is 2^(bits-1). A value is
 * (q - zero) * scale. The tail of a last partial block holds the zero point (it dequantizes to 0).
 */
import type { Tensor } from '../tensor.ts';

export type QuantBits = 4 | 8;

/** How a build's projection weights are stored: as the checkpoint has them, or quantized by the builder. */
export type WeightsMode = 'checkpoint' | 'int8' | 'int4';

/** Raw bytes of a non-float initializer, computed when serialized. */
export interface RawTensor {
  readonly dims: number[];
  bytes(): Uint8Array;
}

/** Where a quantized projection came from: round-to-nearest by the builder, or a hub checkpoint's packing. */
export type QuantMethod = 'int8' | 'int4' | 'gptq' | 'awq';

/** A projection `x @ W` with W [K, N] quantized in MatMulNBits layout, its parts computed on demand. */
export interface QuantizedLinear {
  method: QuantMethod;
  k: number;
  n: number;
  bits: QuantBits;
  blockSize: number;
  /** uint8 [N, blocks, blockSize * bits / 8] */
  packed: RawTensor;
  /** [N, blocks], float32 values written in the graph's float type. */
  scales: Tensor;
  /** uint8 zero points; absent: 2^(bits-1). */
  zeroPoints?: RawTensor | undefined;
  /** GPTQ act-order: row i of B holds input column perm[i] (the input is gathered in this order first). */
  perm?: Int32Array | undefined;
}

/** Blocks per output channel. */
export function blockCount(k: number, blockSize: number): number {
  return Math.ceil(k / blockSize);
}

/** The block sizes ONNX Runtime's CPU MatMulNBits takes. */
export const BLOCK_SIZES = [16, 32, 64, 128, 256] as const;

/**
 * The block of an int8 projection: per output channel, one scale over all of K, written as blocks of
 * up to 256 (the largest ONNX Runtime's CPU kernel takes) that repeat the channel's scale.
 */
export function int8BlockSize(k: number): number {
  return BLOCK_SIZES.find((b) => b >= k) ?? 256;
}

/** Bytes of the zero points row of one output channel. */
export function zeroPointRowBytes(bits: QuantBits, blocks: number): number {
  return bits === 4 ? Math.ceil(blocks / 2) : blocks;
}

/** The quantized values of one weight, in the layout above. */
export interface PackedWeight {
  packed: Uint8Array;
  scales: Float32Array;
  zeroPoints?: Uint8Array | undefined;
}

/** Writes value `q` at position `i` of an output channel's row of B (`row` is its offset). */
export function putValue(packed: Uint8Array, row: number, i: number, q: number, bits: QuantBits): void {
  if (bits === 8) packed[row + i] = q;
  else packed[row + (i >> 1)] = packed[row + (i >> 1)]! | ((q & 15) << ((i & 1) * 4));
}

/** Writes zero point `z` of block `b` into an output channel's zero points row (at `row`). */
export function putZeroPoint(zeros: Uint8Array, row: number, b: number, z: number, bits: QuantBits): void {
  if (bits === 8) zeros[row + b] = z;
  else zeros[row + (b >> 1)] = zeros[row + (b >> 1)]! | ((z & 15) << ((b & 1) * 4));
}

/**
 * Math.round(v) + zero for an integer zero, given half = zero + 0.5, without Math.round (most of the
 * quantizer's time): truncating v + half is floor(v + zero + 0.5) where that is at least 0 (what lies
 * below is clamped to 0 after), except where the sum rounded up to an integer it lies just under; the
 * comparison takes that one back. Exact for |v| under 2^30.
 */
export function roundedPlus(v: number, half: number): number {
  const q = (v + half) | 0;
  return v < q - half ? q - 1 : q;
}

/**
 * Round-to-nearest quantization of `rows` ([N, K] row-major: nn.Linear's layout, one output channel a
 * row). int8: symmetric per output channel, scale = max|w| / 127, zero point 128 (implicit). int4:
 * asymmetric per block of `blockSize`, the range widened to hold 0, scale = (max - min) / 15 and the
 * zero point round(-min / scale), as ONNX Runtime's and GPTQ's round-to-nearest quantizers do.
 */
export function quantizeRows(rows: Float32Array, n: number, k: number, bits: QuantBits, blockSize: number): PackedWeight {
  const blocks = blockCount(k, blockSize);
  const blob = (blockSize * bits) / 8;
  const packed = new Uint8Array(n * blocks * blob);
  const scales = new Float32Array(n * blocks);
  const zeroRow = zeroPointRowBytes(bits, blocks);
  const zeroPoints = bits === 4 ? new Uint8Array(n * zeroRow) : undefined;
  for (let o = 0; o < n; o++) {
    const base = o * k;
    let channelMax = 0;
    if (bits === 8) for (let i = 0; i < k; i++) channelMax = Math.max(channelMax, Math.abs(rows[base + i]!));
    for (let b = 0; b < blocks; b++) {
      const start = b * blockSize;
      const end = Math.min(k, start + blockSize);
      let scale: number;
      let zero: number;
      if (bits === 8) {
        scale = channelMax / 127;
        zero = 128;
      } else {
        let lo = 0;
        let hi = 0;
        for (let i = start; i < end; i++) {
          const w = rows[base + i]!;
          if (w < lo) lo = w;
          if (w > hi) hi = w;
        }
        scale = (hi - lo) / 15;
        zero = scale === 0 ? 8 : Math.min(15, Math.max(0, Math.round(-lo / scale)));
        putZeroPoint(zeroPoints!, o * zeroRow, b, zero, 4);
      }
      scale = Math.fround(scale);
      scales[o * blocks + b] = scale;
      const inverse = scale === 0 ? 0 : 1 / scale;
      const row = (o * blocks + b) * blob;
      const half = zero + 0.5;
      const at = base + start;
      // Past K (a last partial block) the values are the zero point.
      const count = end - start;
      if (bits === 8) {
        for (let i = 0; i < blockSize; i++) {
          const q = i < count ? roundedPlus(rows[at + i]! * inverse, half) : zero;
          packed[row + i] = q < 1 ? 1 : q > 255 ? 255 : q;
        }
        continue;
      }
      // Two values a byte, the low nibble first.
      for (let i = 0; i < blockSize; i += 2) {
        const low = i < count ? roundedPlus(rows[at + i]! * inverse, half) : zero;
        const high = i + 1 < count ? roundedPlus(rows[at + i + 1]! * inverse, half) : zero;
        packed[row + (i >> 1)] = (low < 0 ? 0 : low > 15 ? 15 : low) | ((high < 0 ? 0 : high > 15 ? 15 : high) << 4);
      }
    }
  }
  return { packed, scales, ...(zeroPoints === undefined ? {} : { zeroPoints }) };
}

/** The float values a quantized weight stands for, [N, K] row-major (the reference a test compares to). */
export function dequantizeRows(q: PackedWeight, n: number, k: number, bits: QuantBits, blockSize: number): Float32Array {
  const blocks = blockCount(k, blockSize);
  const blob = (blockSize * bits) / 8;
  const zeroRow = zeroPointRowBytes(bits, blocks);
  const out = new Float32Array(n * k);
  for (let o = 0; o < n; o++) {
    for (let i = 0; i < k; i++) {
      const b = Math.floor(i / blockSize);
      const j = i % blockSize;
      const byte = q.packed[(o * blocks + b) * blob + (bits === 8 ? j : j >> 1)]!;
      const value = bits === 8 ? byte : (byte >> ((j & 1) * 4)) & 15;
      let zero = 1 << (bits - 1);
      if (q.zeroPoints !== undefined) {
        const z = q.zeroPoints[o * zeroRow + (bits === 8 ? b : b >> 1)]!;
        zero = bits === 8 ? z : (z >> ((b & 1) * 4)) & 15;
      }
      out[o * k + i] = (value - zero) * q.scales[o * blocks + b]!;
    }
  }
  return out;
}
