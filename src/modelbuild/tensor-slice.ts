/**
 * Lazy blocks of a checkpoint's tensors, for the tensor-parallel ranks: a block of rows and columns
 * of a matrix (or a range of a vector) is read from its source when the graph writes it, a piece of
 * rows at a time, in the bytes of the output's type (a float16 checkpoint built in float16 is copied,
 * never widened to float32). A block of a transposed view is the transpose of the source's block, so
 * a PyTorch [out, in] weight keeps reading whole rows.
 */
import { encodeFloats, FLOAT_WIDTH, type FloatType } from './float-bits.ts';
import { CHUNK_ELEMENTS, concatPieces, encodedPieces, transpose2d, type Tensor } from './tensor.ts';

/** A range [start, start + count). */
export interface Span {
  start: number;
  count: number;
}

/** What a block was cut from, so that a block of a block reads the source directly. */
interface BlockOf {
  source: Tensor;
  rows: Span;
  cols: Span;
}

const blocks = new WeakMap<Tensor, BlockOf>();

/** Elements [start, start + count) of `tensor` in row-major order, as bytes of `type`. */
function bytesOf(tensor: Tensor, start: number, count: number, type: FloatType): Uint8Array {
  if (tensor.readEncoded !== undefined) return tensor.readEncoded(start, count, type);
  if (tensor.read !== undefined) return encodeFloats(tensor.read(start, count), type);
  return concatPieces([...encodedPieces(tensor, type)]).slice(start * FLOAT_WIDTH[type], (start + count) * FLOAT_WIDTH[type]);
}

/**
 * Rows `rows` and columns `cols` of the 2-D `tensor` ([rows.count + padRows, cols.count]; `padRows`
 * rows of zeros after them), or of the 1-D `tensor` the range `cols` (`rows` then [0, 1)).
 */
export function block(tensor: Tensor, rows: Span, cols: Span, padRows = 0): Tensor {
  const vector = tensor.dims.length === 1;
  const [height, width] = vector ? [1, tensor.dims[0]!] : (tensor.dims as [number, number]);
  if (rows.start < 0 || rows.start + rows.count > height || cols.start < 0 || cols.start + cols.count > width) {
    throw new RangeError(`block rows ${rows.start}+${rows.count}, columns ${cols.start}+${cols.count} is outside [${tensor.dims.join(', ')}]`);
  }
  if (padRows === 0 && rows.start === 0 && rows.count === height && cols.start === 0 && cols.count === width) return tensor;
  if (tensor.origin !== undefined && padRows === 0) return transpose2d(block(tensor.origin, cols, rows));
  const parent = blocks.get(tensor);
  if (parent !== undefined && padRows === 0) {
    return block(parent.source, { start: parent.rows.start + rows.start, count: rows.count }, { start: parent.cols.start + cols.start, count: cols.count });
  }
  const dims = vector ? [cols.count] : [rows.count + padRows, cols.count];
  const source = tensor;
  const pieces = function* (type: FloatType): Iterable<Uint8Array> {
    const size = FLOAT_WIDTH[type];
    const perPiece = Math.max(1, Math.floor(CHUNK_ELEMENTS / width));
    // A source without ranged reads is read once, whole.
    const whole = source.read === undefined && source.readEncoded === undefined ? concatPieces([...encodedPieces(source, type)]) : undefined;
    for (let r = 0; r < rows.count; r += perPiece) {
      const n = Math.min(perPiece, rows.count - r);
      const first = (rows.start + r) * width;
      const fullRows = cols.count === width;
      const start = fullRows ? first : first + cols.start;
      // Whole rows read as they are; a column block reads from its first column to its last.
      const count = fullRows ? n * width : (n - 1) * width + cols.count;
      const raw = whole === undefined ? bytesOf(source, start, count, type) : whole.subarray(start * size, (start + count) * size);
      if (fullRows) {
        yield raw;
        continue;
      }
      const out = new Uint8Array(n * cols.count * size);
      for (let i = 0; i < n; i++) out.set(raw.subarray(i * width * size, (i * width + cols.count) * size), i * cols.count * size);
      yield out;
    }
    for (let done = 0; done < padRows * cols.count; ) {
      const n = Math.min(CHUNK_ELEMENTS, padRows * cols.count - done);
      yield new Uint8Array(n * size);
      done += n;
    }
  };
  const result: Tensor = {
    dims,
    ...(tensor.dtype === undefined ? {} : { dtype: tensor.dtype }),
    get data() {
      const bytes = concatPieces([...pieces('float32')]);
      return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    },
    encoded: pieces,
  };
  if (padRows === 0) blocks.set(result, { source, rows, cols });
  return result;
}

/** Columns `cols` of a 2-D tensor, every row. */
export function columns(tensor: Tensor, cols: Span): Tensor {
  return tensor.dims.length === 1 ? block(tensor, { start: 0, count: 1 }, cols) : block(tensor, { start: 0, count: tensor.dims[0]! }, cols);
}

/** Rows `rows` of a 2-D tensor, every column, then `padRows` rows of zeros. */
export function rowsOf(tensor: Tensor, rows: Span, padRows = 0): Tensor {
  return block(tensor, rows, { start: 0, count: tensor.dims[1]! }, padRows);
}
