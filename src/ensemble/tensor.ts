/**
 * Tensors as they flow between ensemble steps: a KServe datatype, a shape, and the elements flat in
 * row-major order (numbers for numeric types; booleans for BOOL; strings for BYTES). A 64-bit integer
 * element beyond 2^53 is a bigint, exact (FT's random_seed takes the whole uint64 range); within it, a
 * number. The batch dimension comes first.
 */
import type { Datatype, TensorSpec } from '../config/index.ts';
import { ChorusError, invalidArgument } from '../errors.ts';

export type Element = number | boolean | string | bigint;

export interface Tensor {
  datatype: Datatype;
  shape: number[];
  data: Element[];
  /**
   * Set on a value the request did not give (a pipeline's default): a generate step lowers a
   * request_output_len so marked to what the model's context leaves after the prompt, as vLLM does.
   */
  isDefault?: boolean;
}

const INTEGER_RANGES: Partial<Record<Datatype, [number, number]>> = {
  UINT8: [0, 255],
  UINT16: [0, 65535],
  UINT32: [0, 2 ** 32 - 1],
  INT8: [-128, 127],
  INT16: [-32768, 32767],
  INT32: [-(2 ** 31), 2 ** 31 - 1],
};

/** The 64-bit integer types, whose elements may be bigints. */
const WIDE_RANGES: Partial<Record<Datatype, [bigint, bigint]>> = {
  UINT64: [0n, 2n ** 64n - 1n],
  INT64: [-(2n ** 63n), 2n ** 63n - 1n],
};

/** Whether `v` is an integer element of a 64-bit type: a safe integer number, or a bigint in range. */
function wideInteger(v: Element, [min, max]: [bigint, bigint]): boolean {
  if (typeof v === 'bigint') return v >= min && v <= max;
  return typeof v === 'number' && Number.isSafeInteger(v) && BigInt(v) >= min && BigInt(v) <= max;
}

/** A 64-bit integer as an element: a number when it is exactly one, else the bigint. */
export function wideElement(v: bigint): number | bigint {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

/** Elements a shape holds. */
export function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** A tensor, checked: every element fits the datatype and the count matches the shape. */
export function tensor(datatype: Datatype, shape: number[], data: Element[], name = 'tensor'): Tensor {
  if (shape.some((d) => !Number.isInteger(d) || d < 0)) throw invalidArgument(`${name}.shape`, 'a list of non-negative integers', shape);
  if (data.length !== elementCount(shape)) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${name}.data must hold ${elementCount(shape)} elements for shape [${shape.join(', ')}], got ${data.length}`, { param: `${name}.data` });
  }
  const range = INTEGER_RANGES[datatype];
  const wide = WIDE_RANGES[datatype];
  data.forEach((v, i) => {
    const bad =
      datatype === 'BYTES' ? typeof v !== 'string'
      : datatype === 'BOOL' ? typeof v !== 'boolean'
      : wide !== undefined ? !wideInteger(v, wide)
      : range !== undefined ? typeof v !== 'number' || !Number.isInteger(v) || v < range[0] || v > range[1]
      : typeof v !== 'number';
    if (bad) {
      const expected = datatype === 'BYTES' ? 'a string' : datatype === 'BOOL' ? 'true or false' : wide ? `an exact integer in [${wide[0]}, ${wide[1]}]` : range ? `an integer in [${range[0]}, ${range[1]}]` : 'a number';
      throw invalidArgument(`${name}.data[${i}]`, `${expected} (${datatype})`, v);
    }
  });
  return { datatype, shape, data };
}

/** The rows of a tensor along its first dimension, each as a flat list. */
export function rows<T extends Element>(t: Tensor): T[][] {
  const batch = t.shape[0] ?? 1;
  const size = t.shape.length === 0 ? 1 : elementCount(t.shape.slice(1));
  return Array.from({ length: batch }, (_, r) => t.data.slice(r * size, (r + 1) * size) as T[]);
}

/** Numbers of a numeric tensor. */
export function numbers(t: Tensor, name: string): number[] {
  if (t.datatype === 'BYTES' || t.datatype === 'BOOL') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${name} must be a numeric tensor, got ${t.datatype}`, { param: name });
  return t.data as number[];
}

/** One value per batch row from a [batch] or [batch, 1] tensor, or a single value broadcast to `batch`. */
export function perRow<T extends Element>(t: Tensor, batch: number, name: string): T[] {
  const count = t.data.length;
  if (count === batch) return t.data as T[];
  if (count === 1) return Array.from({ length: batch }, () => t.data[0] as T);
  throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${name} must hold 1 value or one per batch row (${batch}), got ${count} (shape [${t.shape.join(', ')}])`, { param: name });
}

/** Rows of different lengths as one [rows, longest] tensor, padded with `pad`. */
export function padded(datatype: Datatype, values: readonly (readonly Element[])[], pad: Element): Tensor {
  const width = Math.max(0, ...values.map((r) => r.length));
  const data: Element[] = [];
  for (const row of values) data.push(...row, ...Array<Element>(width - row.length).fill(pad));
  return { datatype, shape: [values.length, width], data };
}

/**
 * A JSON value as a tensor of an input's spec: a scalar, or nested lists whose nesting gives the shape;
 * a batch dimension of 1 (and any missing leading ones) is added up to the spec's rank.
 */
export function tensorFromValue(name: string, value: unknown, spec: TensorSpec): Tensor {
  const shape: number[] = [];
  let level: unknown = value;
  while (Array.isArray(level)) {
    shape.push(level.length);
    level = level[0];
  }
  const data = (Array.isArray(value) ? (value as unknown[]).flat(Infinity) : [value]) as Element[];
  while (shape.length < spec.dims.length + 1) shape.unshift(1);
  return tensor(spec.datatype, shape, data, name);
}
