/**
 * A small round-to-nearest quantizer into ONNX Runtime's MatMulNBits layout, its dequantization and a
 * plain dequantize-then-matmul reference, for the quantized operators' tests.
 */
import { decodeRaw, encodeFloats, type FloatType } from '../../src/modelbuild/float-bits.ts';

export interface Quantized {
  K: number;
  N: number;
  bits: 4 | 8;
  blockSize: number;
  blocks: number;
  /** uint8 [N, blocks, blockSize * bits / 8]. */
  weight: Uint8Array;
  /** [N, blocks], already rounded to the graph's float type. */
  scales: Float32Array;
  /** uint8 [N, ceil(blocks * bits / 8)], packed as MatMulNBits packs them; undefined: symmetric (2^(bits - 1)). */
  zeroPoints?: Uint8Array;
}

/** `values` rounded to the float type. */
export function roundTo(values: Float32Array, type: FloatType): Float32Array {
  return decodeRaw(encodeFloats(Float32Array.from(values), type), type === 'float32' ? 'F32' : type === 'float16' ? 'F16' : 'BF16');
}

/** Seeded uniform values in [-1, 1) (a linear congruential generator). */
export function seeded(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32 * 2 - 1) * scale;
  }
  return out;
}

/**
 * `w` [N, K] quantized by blocks of K: asymmetric (with zero points, from each block's minimum and
 * maximum) or symmetric (scale from the largest magnitude, the default zero point 2^(bits - 1)).
 */
export function quantize(w: Float32Array, N: number, K: number, bits: 4 | 8, blockSize: number, zeroPoints: boolean, type: FloatType = 'float32'): Quantized {
  const blocks = Math.ceil(K / blockSize);
  const blob = (blockSize * bits) / 8;
  const top = 2 ** bits - 1;
  const weight = new Uint8Array(N * blocks * blob);
  const raw = new Float32Array(N * blocks);
  const zeros = new Uint8Array(N * blocks);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const slice = w.subarray(n * K + b * blockSize, n * K + Math.min(K, (b + 1) * blockSize));
      let lo = 0;
      let hi = 0;
      for (const v of slice) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      const zero = zeroPoints ? Math.min(top, Math.max(0, Math.round((-lo * top) / (hi - lo || 1)))) : 2 ** (bits - 1);
      const scale = zeroPoints ? (hi - lo) / top || 1 : Math.max(-lo, hi) / (2 ** (bits - 1) - 1) || 1;
      raw[n * blocks + b] = scale;
      zeros[n * blocks + b] = zero;
    }
  }
  const scales = roundTo(raw, type);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const scale = scales[n * blocks + b]!;
      const zero = zeros[n * blocks + b]!;
      for (let j = 0; j < blockSize && b * blockSize + j < K; j++) {
        const q = Math.min(top, Math.max(0, Math.round(w[n * K + b * blockSize + j]! / scale) + zero));
        const at = (n * blocks + b) * blob;
        if (bits === 8) weight[at + j] = q;
        else weight[at + (j >> 1)]! |= j & 1 ? q << 4 : q;
      }
    }
  }
  if (!zeroPoints) return { K, N, bits, blockSize, blocks, weight, scales };
  const perRow = Math.ceil((blocks * bits) / 8);
  const packed = new Uint8Array(N * perRow);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const z = zeros[n * blocks + b]!;
      if (bits === 8) packed[n * perRow + b] = z;
      else packed[n * perRow + (b >> 1)]! |= b & 1 ? z << 4 : z;
    }
  }
  return { K, N, bits, blockSize, blocks, weight, scales, zeroPoints: packed };
}

/** The quantized weights as float32 [N, K]: (q - zero) * scale. */
export function dequantize(q: Quantized): Float32Array {
  const { K, N, bits, blockSize, blocks } = q;
  const blob = (blockSize * bits) / 8;
  const perRow = Math.ceil((blocks * bits) / 8);
  const out = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const b = Math.floor(k / blockSize);
      const j = k % blockSize;
      const byte = q.weight[(n * blocks + b) * blob + (bits === 8 ? j : j >> 1)]!;
      const value = bits === 8 ? byte : j & 1 ? byte >> 4 : byte & 15;
      let zero = 2 ** (bits - 1);
      if (q.zeroPoints !== undefined) {
        const z = q.zeroPoints[n * perRow + (bits === 8 ? b : b >> 1)]!;
        zero = bits === 8 ? z : b & 1 ? z >> 4 : z & 15;
      }
      out[n * K + k] = (value - zero) * q.scales[n * blocks + b]!;
    }
  }
  return out;
}

/** Activations by the addon's names, in float64. */
export const ACTIVATIONS: Record<string, (v: number) => number> = {
  relu: (v) => Math.max(0, v),
  silu: (v) => v / (1 + Math.exp(-v)),
  gelu_tanh: (v) => 0.5 * v * (1 + Math.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3))),
};

/** activation(x [M, K] @ w^T + bias), w [N, K], in float64. */
export function matmulReference(x: Float32Array, w: Float32Array, M: number, K: number, N: number, bias?: Float32Array, activation?: string): Float32Array {
  const y = new Float32Array(M * N);
  const f = activation === undefined ? undefined : ACTIVATIONS[activation];
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let sum = bias?.[n] ?? 0;
      for (let k = 0; k < K; k++) sum += x[m * K + k]! * w[n * K + k]!;
      y[m * N + n] = f === undefined ? sum : f(sum);
    }
  }
  return y;
}
