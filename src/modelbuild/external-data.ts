/**
 * An ONNX external data file (`<model>.onnx_data`) written as weights come: each weight's bytes are
 * appended when its graph is serialized, then dropped, so a build never holds more than one weight.
 * Several models of one build may share the file: a weight (the same tensor in the same type) is
 * written once and every model that has it points at the same bytes. Tensors computed by the graph
 * builders (rotary tables), made anew for each model, are matched by their bytes instead.
 */
import { createHash } from 'node:crypto';
import { closeSync, openSync, writeSync } from 'node:fs';
import { ChorusError } from '../errors.ts';
import type { FloatType } from './float-bits.ts';
import type { RawTensor } from './quant/nbits.ts';
import { encodedPieces, isHeld, type Tensor } from './tensor.ts';

/** Where a weight's bytes are in the data file. */
export interface DataLocation {
  offset: number;
  length: number;
}

/** Offsets of large weights are page-aligned, so the runtime may map them in place; small ones 64-byte aligned. */
const PAGE = 4096;
const SMALL_ALIGNMENT = 64;
const MAX_WRITE = 1 << 30;

/** One data file, appended to. */
export class ExternalDataFile {
  private fd: number | undefined;
  private end = 0;
  private readonly written = new WeakMap<Tensor, Map<FloatType, DataLocation>>();
  private readonly computed = new Map<string, DataLocation>();
  private readonly rawWritten = new WeakMap<RawTensor, DataLocation>();

  /**
   * @param path where the file is written (created, or emptied)
   * @param location its name as the models record it: relative to the model files' folder
   * @param onBytes called after each weight with the number of bytes it added
   */
  constructor(
    readonly path: string,
    readonly location: string,
    private readonly onBytes: (bytes: number) => void = () => {},
  ) {
    this.fd = openSync(path, 'w');
  }

  /** The file's size so far. */
  get size(): number {
    return this.end;
  }

  /** Appends `tensor`'s values as `type` (unless the file has them already); where they are. */
  append(tensor: Tensor, type: FloatType, length: number): DataLocation {
    if (isHeld(tensor)) return this.appendComputed(tensor, type, length);
    const known = this.written.get(tensor)?.get(type);
    if (known !== undefined) return known;
    const location = this.write(encodedPieces(tensor, type), length);
    const byType = this.written.get(tensor) ?? new Map<FloatType, DataLocation>();
    byType.set(type, location);
    this.written.set(tensor, byType);
    return location;
  }

  /** Appends a quantized weight's bytes (unless the file has them already); where they are. */
  appendRaw(raw: RawTensor, length: number): DataLocation {
    const known = this.rawWritten.get(raw);
    if (known !== undefined) return known;
    const location = this.write([raw.bytes()], length);
    this.rawWritten.set(raw, location);
    return location;
  }

  private appendComputed(tensor: Tensor, type: FloatType, length: number): DataLocation {
    const pieces = [...encodedPieces(tensor, type)];
    const hash = createHash('sha256').update(`${type}:${tensor.dims.join('x')}:`);
    for (const piece of pieces) hash.update(piece);
    const key = hash.digest('hex');
    const known = this.computed.get(key);
    if (known !== undefined) return known;
    const location = this.write(pieces, length);
    this.computed.set(key, location);
    return location;
  }

  private write(pieces: Iterable<Uint8Array>, length: number): DataLocation {
    if (this.fd === undefined) throw new ChorusError('CHORUS_INTERNAL', `${this.path} was closed before every weight was written`);
    const alignment = length >= 64 * 1024 ? PAGE : SMALL_ALIGNMENT;
    const offset = Math.ceil(this.end / alignment) * alignment;
    let at = offset;
    for (const piece of pieces) {
      let done = 0;
      while (done < piece.byteLength) done += writeSync(this.fd, piece, done, Math.min(MAX_WRITE, piece.byteLength - done), at + done);
      at += piece.byteLength;
    }
    if (at - offset !== length) throw new ChorusError('CHORUS_INTERNAL', `a weight of ${length} bytes wrote ${at - offset} to ${this.path}`);
    this.end = at;
    this.onBytes(length);
    return { offset, length };
  }

  /** Closes the file (idempotent). */
  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
