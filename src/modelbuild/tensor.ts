/**
 * Host tensors the builder works with: float32 values with a shape. A checkpoint's tensors are lazy:
 * their values are read from the file when `data` is asked for, each time (nothing is kept), so a
 * build holds one weight at a time. Code that reads `data` takes it once into a local.
 */
import { convertRaw, decodeRaw, encodeFloats, FLOAT_WIDTH, transposeInto, transposeRaw, type FloatType, type ReadableDtype } from './float-bits.ts';

/** A float32 tensor in row-major order. */
export interface Tensor {
  readonly dims: number[];
  /** The values. On a lazy tensor, a getter that reads (or computes) them on each access. */
  readonly data: Float32Array;
  /** The checkpoint's stored element type (a safetensors dtype), for tensors read from a file. */
  readonly dtype?: string;
  /** Values [start, start + count) in row-major order, without reading the rest (tensors read from a file). */
  read?(start: number, count: number): Float32Array;
  /** Values [start, start + count) as raw bytes of `type`, without a float32 copy where the formats match (tensors read from a file). */
  readEncoded?(start: number, count: number, type: FloatType): Uint8Array;
  /**
   * The values as raw bytes of `type`, in pieces (each a whole number of elements), without holding
   * the tensor as float32 where that can be avoided. Absent: `encodeFloats(data, type)`.
   */
  encoded?(type: FloatType): Iterable<Uint8Array>;
  /** The bytes as stored (integer tensors, such as GPTQ's and AWQ's packed weights). */
  raw?(): Uint8Array;
  /** The tensor this one is a transposed view of (a lazy transpose2d). */
  readonly origin?: Tensor;
}

/** Elements a lazy tensor reads at once: 16 Mi, 64 MiB as float32. */
export const CHUNK_ELEMENTS = 16 * 1024 * 1024;

/** The number of elements of `dims`. */
export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** `[a, b]`: the shape as people write it. */
export function shapeText(dims: readonly number[]): string {
  return `[${dims.join(', ')}]`;
}

/** True when the tensor holds its values (a plain `data` property), false for lazy tensors. */
export function isHeld(tensor: Tensor): boolean {
  return Object.getOwnPropertyDescriptor(tensor, 'data')?.value !== undefined;
}

/** A tensor's values as raw bytes of `type`, piece by piece. */
export function encodedPieces(tensor: Tensor, type: FloatType): Iterable<Uint8Array> {
  return tensor.encoded?.(type) ?? [encodeFloats(tensor.data, type)];
}

/**
 * A tensor whose values are stored in a file as `dtype`: `readRaw(start, count)` returns elements
 * [start, start + count) as raw little-endian bytes.
 */
export function storedTensor(dims: number[], dtype: ReadableDtype, readRaw: (start: number, count: number) => Uint8Array): Tensor {
  const total = elementCount(dims);
  return {
    dims,
    dtype,
    get data() {
      return decodeRaw(readRaw(0, total), dtype);
    },
    read: (start, count) => decodeRaw(readRaw(start, count), dtype),
    readEncoded: (start, count, type) => convertRaw(readRaw(start, count), dtype, type),
    *encoded(type) {
      for (let start = 0; start < total; start += CHUNK_ELEMENTS) yield convertRaw(readRaw(start, Math.min(CHUNK_ELEMENTS, total - start)), dtype, type);
    },
  };
}

/**
 * The transpose of a 2-D tensor. Of a lazy tensor, a lazy one: computed when read, on the bytes of
 * the output's format (a bf16 weight built in bf16 keeps its bits).
 */
export function transpose2d(tensor: Tensor): Tensor {
  const [rows, cols] = tensor.dims as [number, number];
  const dims = [cols, rows];
  if (isHeld(tensor)) return { dims, data: transposeFloats(tensor.data, rows, cols) };
  const source = tensor;
  return {
    dims,
    origin: source,
    ...(source.dtype === undefined ? {} : { dtype: source.dtype }),
    get data() {
      return transposeFloats(source.data, rows, cols);
    },
    *encoded(type) {
      // Converting each element commutes with moving it: convert piece by piece, then transpose the
      // converted bytes (2 bytes an element in half precision instead of float32's 4).
      yield transposeRaw(concatPieces([...encodedPieces(source, type)]), rows, cols, FLOAT_WIDTH[type]);
    },
  };
}

function transposeFloats(src: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  transposeInto(src, out, rows, cols);
  return out;
}

/** Pieces of bytes as one array (the piece itself when there is one). */
export function concatPieces(pieces: Uint8Array[]): Uint8Array {
  if (pieces.length === 1) return pieces[0]!;
  const out = new Uint8Array(pieces.reduce((sum, p) => sum + p.byteLength, 0));
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.byteLength;
  }
  return out;
}
