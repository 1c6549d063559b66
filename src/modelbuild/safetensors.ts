/**
 * The safetensors format: an 8-byte little-endian header length, a JSON header mapping names to
 * `{dtype, shape, data_offsets}`, then the raw little-endian data. Files are read tensor by tensor:
 * the header when the file is opened, then each tensor's byte range with positioned reads when its
 * values are asked for, so a file of any size is read in the memory of its largest tensor. F32, F16
 * and BF16 are read; F32, F16 and BF16 are written, streaming.
 */
import { closeSync, openSync, renameSync, writeSync } from 'node:fs';
import { ChorusError } from '../errors.ts';
import { fileRanges, truncated } from './file-range.ts';
import { FLOAT_WIDTH, READABLE_DTYPES, type FloatType, type ReadableDtype } from './float-bits.ts';
import { elementCount, encodedPieces, shapeText, storedTensor, type Tensor } from './tensor.ts';

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Widths of the dtypes a file may hold, for checking its offsets (only F32, F16 and BF16 are read). */
const WIDTHS: Record<string, number> = { F64: 8, I64: 8, U64: 8, I32: 4, U32: 4, I16: 2, U16: 2, I8: 1, U8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1, F16: 2, BF16: 2, F32: 4 };

/** The largest single write. */
const MAX_WRITE = 1 << 30;

/** The error for a tensor stored in a dtype Chorus cannot read. */
export function unreadableDtype(file: string, name: string, dtype: string): ChorusError {
  return new ChorusError('CHORUS_UNSUPPORTED', `${file}: tensor ${name} is stored as ${dtype}, which cannot be read; supported dtypes: ${READABLE_DTYPES.join(', ')}`, {
    param: name,
    value: dtype,
  });
}

/**
 * Opens `file` and reads its header: every tensor, lazy (see tensor.ts). A file shorter than its
 * header says is refused here, with the sizes. The file must not change while its tensors are read.
 */
export function readSafetensors(file: string): Map<string, Tensor> {
  const ranges = fileRanges(file);
  const size = ranges.size;
  if (size < 8) throw truncated(file, 8, size, 'its 8-byte header length');
  const headerLength = Number(Buffer.from(ranges.read(0, 8)).readBigUInt64LE(0));
  if (headerLength > 100_000_000) throw invalid(file, `header length ${headerLength} is not plausible`);
  const base = 8 + headerLength;
  if (base > size) throw truncated(file, base, size, `its ${headerLength}-byte header`);
  let header: Record<string, HeaderEntry | Record<string, string>>;
  try {
    header = JSON.parse(Buffer.from(ranges.read(8, headerLength)).toString('utf8')) as typeof header;
  } catch (cause) {
    throw invalid(file, `header is not JSON (${(cause as Error).message})`);
  }
  const tensors = new Map<string, Tensor>();
  let expected = base;
  for (const [name, value] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets: offsets } = value as HeaderEntry;
    const width = WIDTHS[dtype];
    const count = Array.isArray(shape) ? elementCount(shape) : Number.NaN;
    if (!Array.isArray(offsets) || !Number.isSafeInteger(offsets[0]) || !Number.isSafeInteger(offsets[1]) || !Number.isSafeInteger(count) || (width !== undefined && offsets[1] - offsets[0] !== count * width)) {
      throw invalid(file, `tensor ${name}: data_offsets ${JSON.stringify(offsets)} for shape ${Array.isArray(shape) ? shapeText(shape) : String(shape)} of ${dtype}`);
    }
    expected = Math.max(expected, base + offsets[1]);
    if (!(READABLE_DTYPES as readonly string[]).includes(dtype)) {
      tensors.set(name, unreadable(file, name, dtype, shape, () => ranges.read(base + offsets[0], offsets[1] - offsets[0])));
      continue;
    }
    const dtypeWidth = FLOAT_WIDTH[dtype as ReadableDtype];
    const readRaw = (start: number, n: number): Uint8Array => ranges.read(base + offsets[0] + start * dtypeWidth, n * dtypeWidth);
    tensors.set(name, storedTensor([...shape], dtype as ReadableDtype, readRaw));
  }
  if (expected > size) throw truncated(file, expected, size, 'its header');
  return tensors;
}

/** Options of `writeSafetensors`. */
export interface WriteSafetensorsOptions {
  /** The header's `__metadata__`. Default: `{ format: 'pt' }`, as transformers writes. */
  metadata?: Record<string, string>;
  /** The stored element type. Default: F32. */
  dtype?: ReadableDtype;
}

/**
 * Writes tensors as a `.safetensors` file (names sorted, as the reference writer does), streaming: each
 * tensor's values are produced and written piece by piece (lazy tensors are never held whole). The
 * file is written beside `file` and renamed over it, so a tensor read from `file` may be written back to it.
 */
export function writeSafetensors(file: string, tensors: ReadonlyMap<string, Tensor>, options: WriteSafetensorsOptions = {}): void {
  const dtype = options.dtype ?? 'F32';
  const type: FloatType = dtype === 'F32' ? 'float32' : dtype === 'F16' ? 'float16' : 'bfloat16';
  const width = FLOAT_WIDTH[dtype];
  const names = [...tensors.keys()].sort();
  const header: Record<string, unknown> = { __metadata__: options.metadata ?? { format: 'pt' } };
  let offset = 0;
  for (const name of names) {
    const tensor = tensors.get(name)!;
    const bytes = elementCount(tensor.dims) * width;
    header[name] = { dtype, shape: tensor.dims, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8); // data starts 8-byte aligned
  const headerBytes = Buffer.from(json, 'utf8');
  const partial = `${file}.partial-${process.pid}`;
  const fd = openSync(partial, 'w');
  try {
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(headerBytes.length));
    let at = writeAll(fd, length, 0);
    at = writeAll(fd, headerBytes, at);
    for (const name of names) {
      const tensor = tensors.get(name)!;
      const end = at + elementCount(tensor.dims) * width;
      for (const piece of encodedPieces(tensor, type)) at = writeAll(fd, piece, at);
      if (at !== end) throw new ChorusError('CHORUS_INTERNAL', `tensor ${name} produced ${at - end + elementCount(tensor.dims) * width} bytes for shape ${shapeText(tensor.dims)}`);
    }
  } finally {
    closeSync(fd);
  }
  renameSync(partial, file);
}

function writeAll(fd: number, bytes: Uint8Array, position: number): number {
  let done = 0;
  while (done < bytes.byteLength) done += writeSync(fd, bytes, done, Math.min(MAX_WRITE, bytes.byteLength - done), position + done);
  return position + bytes.byteLength;
}

/** A tensor of a dtype that cannot be read as floats: its shape and raw bytes are known, its values fail with a clear error. */
function unreadable(file: string, name: string, dtype: string, shape: number[], raw: () => Uint8Array): Tensor {
  return {
    dims: [...shape],
    dtype,
    raw,
    get data(): Float32Array {
      throw unreadableDtype(file, name, dtype);
    },
  };
}

function invalid(file: string, detail: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${file} is not a valid safetensors file: ${detail}`);
}
