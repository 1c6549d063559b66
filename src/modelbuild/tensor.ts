/** Host tensors the builder works with: float32 values with a shape; fp16 only on the way out. */
import { toHalfBits } from '../util/half.ts';

/** A float32 tensor in row-major order. */
export interface Tensor {
  dims: number[];
  data: Float32Array;
}

/** The number of elements of `dims`. */
export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** `[a, b]`: the shape as people write it. */
export function shapeText(dims: readonly number[]): string {
  return `[${dims.join(', ')}]`;
}

/** The transpose of a 2-D tensor. */
export function transpose2d(tensor: Tensor): Tensor {
  const [rows, cols] = tensor.dims as [number, number];
  const out = new Float32Array(rows * cols);
  const src = tensor.data;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) out[c * rows + r] = src[r * cols + c]!;
  }
  return { dims: [cols, rows], data: out };
}

/** A float32 array as fp16 bits. */
export function toHalfArray(data: Float32Array): Uint16Array {
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = toHalfBits(data[i]!);
  return out;
}
