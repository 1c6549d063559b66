/**
 * The safetensors format: an 8-byte little-endian header length, a JSON header mapping names to
 * `{dtype, shape, data_offsets}`, then the raw little-endian data. F32, F16 and BF16 are read (as
 * float32); F32 is written.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { ChorusError } from '../errors.ts';
import { fromBfloat16Bits, fromHalfBits } from '../util/half.ts';
import { elementCount, type Tensor } from './tensor.ts';

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

const BYTES_PER: Record<string, number> = { F32: 4, F16: 2, BF16: 2 };

/** Reads every tensor of a `.safetensors` file as float32. */
export function readSafetensors(file: string): Map<string, Tensor> {
  const bytes = readFileSync(file);
  if (bytes.length < 8) throw invalid(file, 'shorter than its 8-byte header length');
  const headerLength = Number(bytes.readBigUInt64LE(0));
  if (8 + headerLength > bytes.length) throw invalid(file, `header length ${headerLength} runs past the end`);
  let header: Record<string, HeaderEntry | Record<string, string>>;
  try {
    header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as typeof header;
  } catch (cause) {
    throw invalid(file, `header is not JSON (${(cause as Error).message})`);
  }
  const base = 8 + headerLength;
  const tensors = new Map<string, Tensor>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets: [start, end] } = entry as HeaderEntry;
    const width = BYTES_PER[dtype];
    if (width === undefined) throw invalid(file, `tensor ${name} has dtype ${dtype}; F32, F16 and BF16 are supported`);
    const count = elementCount(shape);
    if (end - start !== count * width || base + end > bytes.length) {
      throw invalid(file, `tensor ${name}: ${end - start} bytes for shape [${shape.join(', ')}] of ${dtype}`);
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset + base + start, end - start);
    const data = new Float32Array(count);
    if (dtype === 'F32') for (let i = 0; i < count; i++) data[i] = view.getFloat32(i * 4, true);
    else if (dtype === 'F16') for (let i = 0; i < count; i++) data[i] = fromHalfBits(view.getUint16(i * 2, true));
    else for (let i = 0; i < count; i++) data[i] = fromBfloat16Bits(view.getUint16(i * 2, true));
    tensors.set(name, { dims: [...shape], data });
  }
  return tensors;
}

/** Writes float32 tensors as a `.safetensors` file (names sorted, as the reference writer does). */
export function writeSafetensors(file: string, tensors: ReadonlyMap<string, Tensor>, metadata: Record<string, string> = { format: 'pt' }): void {
  const names = [...tensors.keys()].sort();
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const name of names) {
    const tensor = tensors.get(name)!;
    header[name] = { dtype: 'F32', shape: tensor.dims, data_offsets: [offset, offset + tensor.data.length * 4] };
    offset += tensor.data.length * 4;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8); // data starts 8-byte aligned
  const headerBytes = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + headerBytes.length + offset);
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(out, 8);
  let at = 8 + headerBytes.length;
  for (const name of names) {
    const data = tensors.get(name)!.data;
    Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(out, at);
    at += data.byteLength;
  }
  writeFileSync(file, out);
}

function invalid(file: string, detail: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${file} is not a valid safetensors file: ${detail}`);
}
