/**
 * The GGUF v3 container: the magic `GGUF`, version 3, the tensor and metadata counts, the metadata
 * key-value pairs, one info per tensor (name, dimensions innermost first, type, offset into the data),
 * then the data, every tensor starting on the file's alignment (`general.alignment`, 32 by default).
 * All little-endian. The writer lays the header out from the tensors' shapes and types, then encodes and
 * writes the tensors one at a time, so a model is never held in memory twice.
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { ChorusError } from '../../errors.ts';
import { encodeTensor, tensorBytes, type GgmlType } from './encode.ts';

export const GGUF_ALIGNMENT = 32;

/** Metadata value types, with their on-disk codes. */
const VALUE_TYPE = { u8: 0, i8: 1, u16: 2, i16: 3, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10, i64: 11, f64: 12 } as const;

/** A metadata value: scalars and arrays of one scalar type. */
export type GgufValue =
  | { type: 'u32' | 'i32' | 'f32' | 'u64'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'strings'; value: readonly string[] }
  | { type: 'f32s'; value: Float32Array | readonly number[] }
  | { type: 'i32s'; value: Int32Array | readonly number[] };

/** One tensor to write: its name, its shape as PyTorch writes it (outermost first), its type, its values. */
export interface GgufTensor {
  name: string;
  dims: readonly number[];
  type: GgmlType;
  /** Called once, when the tensor's turn to be written comes. */
  values(): Float32Array;
}

/** Bytes of the header, built up in chunks. */
class HeaderBytes {
  readonly chunks: Buffer[] = [];
  length = 0;
  private push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.length += chunk.length;
  }
  u32(value: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(value);
    this.push(b);
  }
  i32(value: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(value);
    this.push(b);
  }
  u64(value: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(value));
    this.push(b);
  }
  f32(value: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(value);
    this.push(b);
  }
  u8(value: number): void {
    this.push(Buffer.of(value));
  }
  string(value: string): void {
    const bytes = Buffer.from(value, 'utf8');
    this.u64(bytes.length);
    this.push(bytes);
  }
  raw(chunk: Buffer): void {
    this.push(chunk);
  }
}

function writeValue(out: HeaderBytes, value: GgufValue): void {
  const array = (elementType: number, count: number): void => {
    out.u32(VALUE_TYPE.array);
    out.u32(elementType);
    out.u64(count);
  };
  switch (value.type) {
    case 'u32':
    case 'i32':
    case 'f32':
    case 'u64':
      out.u32(VALUE_TYPE[value.type]);
      out[value.type](value.value);
      return;
    case 'bool':
      out.u32(VALUE_TYPE.bool);
      out.u8(value.value ? 1 : 0);
      return;
    case 'string':
      out.u32(VALUE_TYPE.string);
      out.string(value.value);
      return;
    case 'strings':
      array(VALUE_TYPE.string, value.value.length);
      for (const s of value.value) out.string(s);
      return;
    case 'f32s':
      array(VALUE_TYPE.f32, value.value.length);
      out.raw(Buffer.from(Float32Array.from(value.value).buffer));
      return;
    case 'i32s':
      array(VALUE_TYPE.i32, value.value.length);
      out.raw(Buffer.from(Int32Array.from(value.value).buffer));
      return;
  }
}

const align = (n: number): number => Math.ceil(n / GGUF_ALIGNMENT) * GGUF_ALIGNMENT;

/** Writes a GGUF file: `metadata` in order, then `tensors`, each encoded when its turn comes. Returns the file's size. */
export function writeGguf(file: string, metadata: ReadonlyMap<string, GgufValue>, tensors: readonly GgufTensor[]): number {
  const names = new Set<string>();
  for (const t of tensors) {
    if (names.has(t.name)) throw new ChorusError('CHORUS_INTERNAL', `GGUF tensor ${t.name} is written twice`);
    names.add(t.name);
  }
  const header = new HeaderBytes();
  header.raw(Buffer.from('GGUF', 'latin1'));
  header.u32(3);
  header.u64(tensors.length);
  header.u64(metadata.size);
  for (const [key, value] of metadata) {
    header.string(key);
    writeValue(header, value);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    header.string(t.name);
    header.u32(t.dims.length);
    for (const d of [...t.dims].reverse()) header.u64(d); // ne[0] is the innermost (contiguous) dimension
    header.u32(t.type);
    header.u64(offset);
    offsets.push(offset);
    offset = align(offset + tensorBytes(t.dims, t.type));
  }
  const fd = openSync(file, 'w');
  try {
    let at = 0;
    const write = (chunk: Uint8Array): void => {
      writeSync(fd, chunk, 0, chunk.length, at);
      at += chunk.length;
    };
    for (const chunk of header.chunks) write(chunk);
    const dataStart = align(at);
    write(Buffer.alloc(dataStart - at));
    tensors.forEach((t, i) => {
      write(Buffer.alloc(dataStart + offsets[i]! - at));
      const values = t.values();
      const count = t.dims.reduce((a, b) => a * b, 1);
      if (values.length !== count) throw new ChorusError('CHORUS_INTERNAL', `GGUF tensor ${t.name} has ${values.length} values for shape [${t.dims.join(', ')}]`);
      write(encodeTensor(values, t.dims, t.type));
    });
    write(Buffer.alloc(dataStart + offset - at));
    return at;
  } finally {
    closeSync(fd);
  }
}

/** A tensor as a GGUF file lists it. */
export interface GgufTensorInfo {
  name: string;
  /** Outermost first, as PyTorch writes shapes. */
  dims: number[];
  type: number;
  /** From the start of the file. */
  offset: number;
}

/** What a GGUF file's header says. */
export interface GgufHeader {
  version: number;
  metadata: Map<string, unknown>;
  tensors: GgufTensorInfo[];
}

/** Reads a GGUF file's header (metadata and tensor infos; arrays as JS arrays). */
export function readGgufHeader(file: string): GgufHeader {
  const fd = openSync(file, 'r');
  try {
    let at = 0;
    const read = (n: number): Buffer => {
      const b = Buffer.alloc(n);
      if (readSync(fd, b, 0, n, at) !== n) throw new ChorusError('CHORUS_FILE_INVALID', `${file} ends inside its GGUF header (at byte ${at})`);
      at += n;
      return b;
    };
    const u32 = (): number => read(4).readUInt32LE();
    const u64 = (): number => Number(read(8).readBigUInt64LE());
    const string = (): string => read(u64()).toString('utf8');
    const scalar = (type: number): unknown => {
      switch (type) {
        case VALUE_TYPE.u8: return read(1).readUInt8();
        case VALUE_TYPE.i8: return read(1).readInt8();
        case VALUE_TYPE.u16: return read(2).readUInt16LE();
        case VALUE_TYPE.i16: return read(2).readInt16LE();
        case VALUE_TYPE.u32: return u32();
        case VALUE_TYPE.i32: return read(4).readInt32LE();
        case VALUE_TYPE.f32: return read(4).readFloatLE();
        case VALUE_TYPE.bool: return read(1).readUInt8() !== 0;
        case VALUE_TYPE.string: return string();
        case VALUE_TYPE.u64: return u64();
        case VALUE_TYPE.i64: return Number(read(8).readBigInt64LE());
        case VALUE_TYPE.f64: return read(8).readDoubleLE();
        case VALUE_TYPE.array: {
          const elementType = u32();
          return Array.from({ length: u64() }, () => scalar(elementType));
        }
        default: throw new ChorusError('CHORUS_FILE_INVALID', `${file}: unknown GGUF value type ${type}`);
      }
    };
    if (read(4).toString('latin1') !== 'GGUF') throw new ChorusError('CHORUS_FILE_INVALID', `${file} is not a GGUF file (no GGUF magic)`);
    const version = u32();
    const tensorCount = u64();
    const kvCount = u64();
    const metadata = new Map<string, unknown>();
    for (let i = 0; i < kvCount; i++) {
      const key = string();
      metadata.set(key, scalar(u32()));
    }
    const infos = Array.from({ length: tensorCount }, () => {
      const name = string();
      const dims = Array.from({ length: u32() }, () => u64()).reverse();
      return { name, dims, type: u32(), offset: u64() };
    });
    const alignment = Number(metadata.get('general.alignment') ?? GGUF_ALIGNMENT);
    const dataStart = Math.ceil(at / alignment) * alignment;
    return { version, metadata, tensors: infos.map((t) => ({ ...t, offset: dataStart + t.offset })) };
  } finally {
    closeSync(fd);
  }
}
