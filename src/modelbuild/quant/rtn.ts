/**
 * `chorus build --weights int8|int4`: every linear projection of a decoder quantized by round to
 * nearest as it is written (and the LM head unless kept in float; the embeddings stay float). Each
 * projection's values are read and quantized when its packed weight is serialized, and the result is
 * kept only until its scales and zero points have been written too, so a build holds one weight at a
 * time, as a float build does.
 */
import { ChorusError } from '../../errors.ts';
import type { DecoderWeights, Linear } from '../decoder-spec.ts';
import { transposeInto } from '../float-bits.ts';
import type { Tensor } from '../tensor.ts';
import { BLOCK_SIZES, blockCount, int8BlockSize, quantizeRows, zeroPointRowBytes, type PackedWeight, type QuantBits, type QuantizedLinear } from './nbits.ts';

/** What a build quantizes, and how. */
export interface QuantPlan {
  weights: 'int8' | 'int4';
  /** int4: values per scale. Default 128; smaller for models whose dims are small (32 for stories260K). */
  groupSize?: number;
  /**
   * Quantize the LM head too (a tied head gets a quantized copy; the embeddings stay float). Default:
   * true for int8; false for int4, where the head is the layer that loses the most (stories260K's
   * perplexity: +12% with it quantized, +9% without).
   */
  head?: boolean;
}

/** What a build quantized, for its summary and chorus_build.json. */
export interface QuantSummary {
  weights: 'int8' | 'int4' | 'gptq' | 'awq';
  bits: QuantBits;
  /** Values per scale (int8: the whole input of each output channel). */
  groupSize: number | 'channel';
  projections: number;
  head: boolean;
  embeddings: false;
}

export const DEFAULT_GROUP_SIZE = 128;

/** The group size checked: one of the block sizes ONNX Runtime's MatMulNBits takes. */
export function checkGroupSize(value: number, param = 'groupSize'): number {
  if (!(BLOCK_SIZES as readonly number[]).includes(value)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${param} must be one of ${BLOCK_SIZES.join(', ')}, got ${value}`, { param, value });
  return value;
}

/** The last weight quantized: its packed values are serialized first, then its scales and zero points. */
let last: { key: object; value: PackedWeight } | undefined;

/**
 * A projection quantized on demand from `rows`, which yields its [N, K] values (nn.Linear's layout).
 * `key` identifies the weight for the one-weight cache.
 */
export function lazyQuantized(key: object, rows: () => Float32Array, n: number, k: number, bits: QuantBits, blockSize: number): QuantizedLinear {
  const values = (): PackedWeight => {
    if (last?.key !== key) last = { key, value: quantizeRows(rows(), n, k, bits, blockSize) };
    return last.value;
  };
  const blocks = blockCount(k, blockSize);
  const scales: Tensor = {
    dims: [n, blocks],
    get data() {
      return values().scales;
    },
  };
  return {
    method: bits === 8 ? 'int8' : 'int4',
    k,
    n,
    bits,
    blockSize,
    packed: { dims: [n, blocks, (blockSize * bits) / 8], bytes: () => values().packed },
    scales,
    ...(bits === 4 ? { zeroPoints: { dims: [n, zeroPointRowBytes(bits, blocks)], bytes: () => values().zeroPoints! } } : {}),
  };
}

/** A MatMul-layout [K, N] linear quantized lazily. */
function quantizeLinear(w: Linear, bits: QuantBits, groupSize: number): Linear {
  const [k, n] = w.weight.dims as [number, number];
  const weight = w.weight;
  // A lazy transpose of nn.Linear's [N, K] (the usual case) is read as its source, already in rows.
  const origin = weight.origin;
  const rows =
    origin !== undefined && origin.dims[0] === n && origin.dims[1] === k
      ? (): Float32Array => origin.data
      : (): Float32Array => {
          const out = new Float32Array(k * n);
          transposeInto(weight.data, out, k, n);
          return out;
        };
  return { ...w, quantized: lazyQuantized(w, rows, n, k, bits, bits === 8 ? int8BlockSize(k) : groupSize) };
}

/** The decoder's weights with every projection (and the head, unless kept) quantized as `plan` says. */
export function quantizeDecoderWeights(weights: DecoderWeights, plan: QuantPlan): { weights: DecoderWeights; summary: QuantSummary } {
  const bits: QuantBits = plan.weights === 'int8' ? 8 : 4;
  const groupSize = checkGroupSize(plan.groupSize ?? DEFAULT_GROUP_SIZE);
  let projections = 0;
  const q = (w: Linear): Linear => {
    projections++;
    return quantizeLinear(w, bits, groupSize);
  };
  const layers = weights.layers.map((layer) => ({
    ...layer,
    q: q(layer.q),
    k: q(layer.k),
    v: q(layer.v),
    o: q(layer.o),
    up: q(layer.up),
    down: q(layer.down),
    ...(layer.gate === undefined ? {} : { gate: q(layer.gate) }),
  }));
  const head = plan.head ?? plan.weights === 'int8';
  let lmHeadQuantized: QuantizedLinear | undefined;
  if (head) {
    const table = weights.lmHead ?? weights.embedTokens;
    const [n, k] = table.dims as [number, number];
    lmHeadQuantized = lazyQuantized(table, () => table.data, n, k, bits, bits === 8 ? int8BlockSize(k) : groupSize);
  }
  return {
    weights: { ...weights, layers, ...(lmHeadQuantized === undefined ? {} : { lmHeadQuantized }) },
    summary: { weights: plan.weights, bits, groupSize: bits === 8 ? 'channel' : groupSize, projections, head, embeddings: false },
  };
}
