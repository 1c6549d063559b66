/**
 * Quantized projections through the native addon's QuantLinear operator (domain `chorus`): ONNX
 * Runtime's MatMulNBits (com.microsoft) inputs, layout and attributes, plus Linear's bias and activation
 * in the same node. Only the addon runs these graphs (the slot and paged decoders).
 */
import type { GraphBuilder } from './graph.ts';
import type { LinearActivation } from './layers.ts';

/** The initializers of a MatMulNBits projection, by name. */
export interface QuantizedProjection {
  /** uint8 [N, ceil(K / blockSize), blockSize * bits / 8]. */
  weight: string;
  /** [N, ceil(K / blockSize)] of the graph's float type. */
  scales: string;
  /** uint8, packed as MatMulNBits packs them; absent: 2^(bits - 1). */
  zeroPoints?: string;
}

/** MatMulNBits' attributes. */
export interface QuantizedShape {
  K: number;
  N: number;
  bits: 4 | 8;
  blockSize: number;
}

/** The addon's fused additions: a bias [N] (a name) and an activation; and MatMulNBits' accuracy level. */
export interface QuantLinearOptions {
  bias?: string;
  activation?: LinearActivation;
  name?: string;
  /**
   * 4: 8-bit weights take int8 activations on the CPU (each row quantized per block of the weights, as
   * MatMulNBits' accuracy_level 4); 0 (the default): float activations, exact against the dequantized
   * weights. CUDA ignores it.
   */
  accuracyLevel?: 0 | 4;
  /**
   * A gated MLP's two projections in one (as the addon's Linear's `gated`): B's N rows are the gate's
   * then the up projection's (bias likewise), and the output [..., N / 2] is activation(gate) * up.
   */
  gated?: boolean;
}

/**
 * `activation(x @ dequantized^T + bias)` as one QuantLinear node; the inputs sit where MatMulNBits has
 * them (A, B, scales, zero_points, g_idx left out, bias), so that a MatMulNBits node becomes one by its
 * op type, domain and the two fused additions.
 */
export function quantLinear(g: GraphBuilder, x: string, w: QuantizedProjection, shape: QuantizedShape, options: QuantLinearOptions = {}): string {
  const { K, N, bits, blockSize } = shape;
  if (bits !== 4 && bits !== 8) throw new RangeError(`bits must be 4 or 8, got ${String(bits)}`);
  if (!Number.isInteger(blockSize) || blockSize < 16 || (blockSize & (blockSize - 1)) !== 0) throw new RangeError(`blockSize must be a power of 2 of at least 16, got ${blockSize}`);
  if (!Number.isInteger(K) || K < 1 || !Number.isInteger(N) || N < 1) throw new RangeError(`K and N must be positive integers, got K ${K}, N ${N}`);
  const inputs = [x, w.weight, w.scales, w.zeroPoints ?? '', '', options.bias ?? ''];
  while (inputs[inputs.length - 1] === '') inputs.pop();
  if (options.gated === true && N % 2 !== 0) throw new RangeError(`a gated QuantLinear's N must be even (the gate's rows, then the up projection's), got ${N}`);
  const attributes = {
    K,
    N,
    bits,
    block_size: blockSize,
    ...(options.accuracyLevel ? { accuracy_level: options.accuracyLevel } : {}),
    ...(options.activation === undefined ? {} : { activation: options.activation }),
    ...(options.gated === true ? { gated: 1 } : {}),
  };
  return g.op('QuantLinear', inputs, attributes, { domain: 'chorus', ...(options.name === undefined ? {} : { name: options.name }) });
}
