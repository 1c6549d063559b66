/**
 * A tensor of a torch.save file: a view of a storage (offset, sizes and strides, in elements). It is
 * lazy like a safetensors tensor: its values are read from the storage's bytes when asked for. A view
 * in row-major order reads its range directly; any other (a transposed weight) gathers its elements
 * from the span of the storage it covers.
 */
import { ChorusError } from '../../errors.ts';
import { READABLE_DTYPES, type ReadableDtype } from '../float-bits.ts';
import { unreadableDtype } from '../safetensors.ts';
import { elementCount, shapeText, storedTensor, type Tensor } from '../tensor.ts';
import type { StorageKind, StorageRef } from './torch-globals.ts';

/** A tensor read from a torch.save file (so a state dict's tensors can be told from its other values). */
export class TorchTensor implements Tensor {
  readonly dims: number[];
  readonly dtype: string;
  private readonly stored: Tensor | undefined;

  constructor(
    private readonly storage: StorageRef,
    kind: StorageKind,
    private readonly offset: number,
    size: number[],
    private readonly stride: number[],
  ) {
    this.dims = size;
    this.dtype = kind.dtype;
    if ((READABLE_DTYPES as readonly string[]).includes(kind.dtype)) {
      const width = kind.width;
      const contiguous = isRowMajor(size, stride);
      this.stored = storedTensor(size, kind.dtype as ReadableDtype, (start, count) => {
        const bytes = this.bytes();
        if (contiguous) return bytes.read((offset + start) * width, count * width);
        return this.gather(bytes, width, start, count);
      });
    }
  }

  get data(): Float32Array {
    return this.readable().data;
  }

  read(start: number, count: number): Float32Array {
    return this.readable().read!(start, count);
  }

  *encoded(type: Parameters<NonNullable<Tensor['encoded']>>[0]): Iterable<Uint8Array> {
    yield* this.readable().encoded!(type);
  }

  private readable(): Tensor {
    if (this.stored === undefined) throw unreadableDtype(this.storage.source, `in storage ${this.storage.key}`, this.dtype);
    return this.stored;
  }

  private bytes(): NonNullable<StorageRef['bytes']> {
    const bytes = this.storage.bytes;
    if (bytes === undefined) throw new ChorusError('CHORUS_INTERNAL', `${this.storage.source}: storage ${this.storage.key} was never located`);
    return bytes;
  }

  /** Elements [start, start + count) in row-major order of a view that is not row-major. */
  private gather(bytes: NonNullable<StorageRef['bytes']>, width: number, start: number, count: number): Uint8Array {
    const dims = this.dims;
    const index = new Array<number>(dims.length).fill(0);
    let rest = start;
    for (let d = dims.length - 1; d >= 0; d--) {
      index[d] = rest % dims[d]!;
      rest = Math.floor(rest / dims[d]!);
    }
    const positions = new Float64Array(count);
    let low = Infinity;
    let high = -Infinity;
    for (let i = 0; i < count; i++) {
      let position = this.offset;
      for (let d = 0; d < dims.length; d++) position += index[d]! * this.stride[d]!;
      positions[i] = position;
      low = Math.min(low, position);
      high = Math.max(high, position);
      for (let d = dims.length - 1; d >= 0; d--) {
        if (++index[d]! < dims[d]!) break;
        index[d] = 0;
      }
    }
    if (count === 0) return new Uint8Array(0);
    const span = bytes.read(low * width, (high - low + 1) * width);
    const out = new Uint8Array(count * width);
    for (let i = 0; i < count; i++) out.set(span.subarray((positions[i]! - low) * width, (positions[i]! - low + 1) * width), i * width);
    return out;
  }
}

/** The tensor a pickle's _rebuild_tensor builds: checked against its storage's size. */
export function storageTensor(storage: StorageRef, kind: StorageKind | undefined, offset: number, size: number[], stride: number[]): TorchTensor {
  const valid = (n: unknown): boolean => Number.isSafeInteger(n) && (n as number) >= 0;
  if (!valid(offset) || !size.every(valid) || !stride.every(valid) || size.length !== stride.length) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${storage.source}: a tensor of storage ${storage.key} has offset ${String(offset)}, sizes ${JSON.stringify(size)} and strides ${JSON.stringify(stride)}`);
  }
  const last = elementCount(size) === 0 ? offset : offset + size.reduce((sum, n, d) => sum + (n - 1) * stride[d]!, 0);
  const elementKind = kind ?? storage.kind;
  const numel = (storage.numel * storage.kind.width) / elementKind.width;
  if (last >= numel && elementCount(size) > 0) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${storage.source}: a tensor of shape ${shapeText(size)} reaches element ${last} of storage ${storage.key}, which holds ${numel}`);
  }
  return new TorchTensor(storage, elementKind, offset, size, stride);
}

/** True when the strides are those of row-major order (dimensions of size 1 have any stride). */
function isRowMajor(size: readonly number[], stride: readonly number[]): boolean {
  let expected = 1;
  for (let d = size.length - 1; d >= 0; d--) {
    if (size[d] !== 1 && stride[d] !== expected) return false;
    expected *= size[d]!;
  }
  return true;
}
