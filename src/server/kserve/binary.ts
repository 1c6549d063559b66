/**
 * KServe v2's binary tensor extension: a request or response body is a JSON header of
 * `Inference-Header-Content-Length` bytes followed by raw tensors, in the order of the tensors whose
 * `parameters.binary_data_size` says how many bytes each takes. Raw tensors are little-endian, row-major;
 * BOOL is one byte; BYTES elements are each a 4-byte little-endian length and the bytes.
 */
import { ChorusError } from '../../errors.ts';
import { wideElement, type Datatype, type Element } from '../../serving/index.ts';
import { fromHalfBits, toHalfBits } from '../../util/half.ts';

const WIDTH: Partial<Record<Datatype, number>> = { BOOL: 1, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, FP16: 2, BF16: 2, UINT32: 4, INT32: 4, FP32: 4, UINT64: 8, INT64: 8, FP64: 8 };

/** Elements from raw bytes. */
export function decodeRaw(datatype: Datatype, bytes: Buffer, name: string): Element[] {
  if (datatype === 'BYTES') {
    const out: string[] = [];
    let at = 0;
    while (at < bytes.length) {
      if (at + 4 > bytes.length) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name}: a BYTES element's 4-byte length is cut off at byte ${at}`, { param: name });
      const length = bytes.readUInt32LE(at);
      if (at + 4 + length > bytes.length) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name}: a BYTES element of ${length} bytes runs past the tensor's ${bytes.length} bytes`, { param: name });
      out.push(utf8(bytes.subarray(at + 4, at + 4 + length), name));
      at += 4 + length;
    }
    return out;
  }
  const width = WIDTH[datatype];
  if (width === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', `input ${name}: datatype ${datatype} has no binary form here`, { param: name });
  if (bytes.length % width !== 0) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name}: ${bytes.length} bytes is not a whole number of ${datatype} elements (${width} bytes each)`, { param: name });
  const count = bytes.length / width;
  const out: Element[] = [];
  for (let i = 0; i < count; i++) {
    const at = i * width;
    switch (datatype) {
      case 'BOOL': out.push(bytes[at] !== 0); break;
      case 'UINT8': out.push(bytes.readUInt8(at)); break;
      case 'INT8': out.push(bytes.readInt8(at)); break;
      case 'UINT16': out.push(bytes.readUInt16LE(at)); break;
      case 'INT16': out.push(bytes.readInt16LE(at)); break;
      case 'FP16': out.push(fromHalfBits(bytes.readUInt16LE(at))); break;
      case 'BF16': out.push(new Float32Array(new Uint32Array([bytes.readUInt16LE(at) << 16]).buffer)[0]!); break;
      case 'UINT32': out.push(bytes.readUInt32LE(at)); break;
      case 'INT32': out.push(bytes.readInt32LE(at)); break;
      case 'FP32': out.push(bytes.readFloatLE(at)); break;
      case 'UINT64': out.push(wideElement(bytes.readBigUInt64LE(at))); break;
      case 'INT64': out.push(wideElement(bytes.readBigInt64LE(at))); break;
      case 'FP64': out.push(bytes.readDoubleLE(at)); break;
      default: break;
    }
  }
  return out;
}

/** Raw bytes of elements. */
export function encodeRaw(datatype: Datatype, data: readonly Element[]): Buffer {
  if (datatype === 'BYTES') {
    return Buffer.concat(
      data.map((value) => {
        const bytes = Buffer.from(String(value), 'utf8');
        const length = Buffer.alloc(4);
        length.writeUInt32LE(bytes.length);
        return Buffer.concat([length, bytes]);
      }),
    );
  }
  const width = WIDTH[datatype]!;
  const out = Buffer.alloc(width * data.length);
  data.forEach((value, i) => {
    const at = i * width;
    const n = Number(value);
    switch (datatype) {
      case 'BOOL': out[at] = value === true ? 1 : 0; break;
      case 'UINT8': out.writeUInt8(n, at); break;
      case 'INT8': out.writeInt8(n, at); break;
      case 'UINT16': out.writeUInt16LE(n, at); break;
      case 'INT16': out.writeInt16LE(n, at); break;
      case 'FP16': out.writeUInt16LE(toHalfBits(n), at); break;
      case 'BF16': out.writeUInt16LE(new Uint32Array(new Float32Array([n]).buffer)[0]! >>> 16, at); break;
      case 'UINT32': out.writeUInt32LE(n, at); break;
      case 'INT32': out.writeInt32LE(n, at); break;
      case 'FP32': out.writeFloatLE(n, at); break;
      case 'UINT64': out.writeBigUInt64LE(BigInt(value as number | bigint), at); break;
      case 'INT64': out.writeBigInt64LE(BigInt(value as number | bigint), at); break;
      case 'FP64': out.writeDoubleLE(n, at); break;
      default: break;
    }
  });
  return out;
}

/** UTF-8 text, or an error naming the tensor when the bytes are not valid UTF-8. */
export function utf8(bytes: Buffer, name: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${name} must be valid UTF-8`, { param: name });
  }
}
