/** Ensemble tensors to ONNX Runtime tensors and back, by KServe datatype. */
import ort from 'onnxruntime-node';
import { ChorusError } from '../errors.ts';
import { toHalfBits, widenHalf } from '../util/half.ts';
import { wideElement, type Element, type Tensor } from './tensor.ts';

const TO_ORT: Record<string, ort.Tensor.Type> = {
  BOOL: 'bool', UINT8: 'uint8', UINT16: 'uint16', UINT32: 'uint32', UINT64: 'uint64', INT8: 'int8', INT16: 'int16', INT32: 'int32', INT64: 'int64',
  FP16: 'float16', FP32: 'float32', FP64: 'float64', BYTES: 'string',
};
const FROM_ORT = Object.fromEntries(Object.entries(TO_ORT).map(([k, v]) => [v, k])) as Record<string, Tensor['datatype']>;

export function toOrt(t: Tensor, name: string): ort.Tensor {
  const type = TO_ORT[t.datatype];
  if (type === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', `${name}: datatype ${t.datatype} has no ONNX Runtime equivalent`, { param: name });
  const values = t.data;
  switch (type) {
    case 'string':
      return new ort.Tensor('string', values as string[], t.shape);
    case 'bool':
      return new ort.Tensor('bool', Uint8Array.from(values as boolean[], (v) => (v ? 1 : 0)), t.shape);
    case 'int64':
      return new ort.Tensor('int64', BigInt64Array.from(values as Array<number | bigint>, (v) => BigInt(v)), t.shape);
    case 'uint64':
      return new ort.Tensor('uint64', BigUint64Array.from(values as Array<number | bigint>, (v) => BigInt(v)), t.shape);
    case 'float16':
      return new ort.Tensor('float16', Uint16Array.from(values as number[], toHalfBits), t.shape);
    default:
      return new ort.Tensor(type, values as number[] as never, t.shape);
  }
}

export function fromOrt(t: ort.Tensor): Tensor {
  const datatype = FROM_ORT[t.type];
  if (datatype === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', `ONNX Runtime type ${t.type} has no KServe datatype`);
  let data: Element[];
  if (t.type === 'bool') data = Array.from(t.data as Uint8Array, (v) => v !== 0);
  else if (t.type === 'int64' || t.type === 'uint64') data = Array.from(t.data as BigInt64Array, wideElement);
  else if (t.type === 'float16') data = Array.from(widenHalf(t.data as Uint16Array));
  else if (t.type === 'string') data = [...(t.data as string[])];
  else data = Array.from(t.data as Float32Array);
  return { datatype, shape: [...t.dims], data };
}
