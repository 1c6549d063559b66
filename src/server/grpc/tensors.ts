/**
 * KServe v2 gRPC tensors: a request's inputs from typed `contents` or from `raw_input_contents` (one
 * raw buffer per input, in order, in the binary extension's layout), and outputs as
 * `raw_output_contents`, as Triton answers (tritonclient.grpc reads them with as_numpy).
 */
import { DATATYPES, tensor, wideElement, type Datatype, type Element, type Tensor, type TensorRecord } from '../../serving/index.ts';
import { ChorusError, invalidArgument } from '../../errors.ts';
import { checkFields, checkShape } from '../kserve/checks.ts';
import type { ModelInfo } from './engine.ts';
import { decodeRaw, encodeRaw, utf8 } from '../kserve/binary.ts';

/** A 64-bit integer as protobufjs hands it over (a decimal string, or a number). */
type Long = string | number;

/** InferTensorContents, as the proto loader gives it. */
export interface Contents {
  bool_contents?: boolean[];
  int_contents?: number[];
  int64_contents?: Long[];
  uint_contents?: number[];
  uint64_contents?: Long[];
  fp32_contents?: number[];
  fp64_contents?: number[];
  bytes_contents?: Buffer[];
}

/** ModelInferRequest.InferInputTensor. */
export interface InputMessage {
  name: string;
  datatype: string;
  shape: Long[];
  contents?: Contents | null;
}

/** ModelInferResponse.InferOutputTensor. */
export interface OutputMessage {
  name: string;
  datatype: string;
  shape: number[];
}

/** Whether typed contents hold any element. */
const holds = (contents: Contents | null | undefined): boolean => Object.values(contents ?? {}).some((values) => Array.isArray(values) && values.length > 0);

/**
 * The inputs of a request as checked tensors by name: each shape against the one `info` declares, and a
 * pipeline's request fields against their bounds, as KServe infer over HTTP checks them.
 */
export function requestTensors(inputs: readonly InputMessage[], raw: readonly Buffer[], info: ModelInfo): TensorRecord {
  if (inputs.length === 0) throw invalidArgument('inputs', 'a non-empty list of tensors', inputs);
  if (raw.length > 0 && raw.length !== inputs.length) throw invalidArgument('raw_input_contents', `one buffer per input (${inputs.length})`, `${raw.length} buffers`);
  const out: TensorRecord = {};
  inputs.forEach((input, i) => {
    const label = `inputs[${i}] (${input.name})`;
    if (input.name === '') throw invalidArgument(`inputs[${i}].name`, 'a non-empty string', input.name);
    if (!DATATYPES.includes(input.datatype as Datatype)) throw invalidArgument(`${label}.datatype`, `one of ${DATATYPES.join(', ')}`, input.datatype);
    if (input.name in out) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `inputs must be tensors of different names, got ${input.name} twice`, { param: 'inputs' });
    if (raw.length > 0 && holds(input.contents)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${label} gives both contents and raw_input_contents: give its elements one way`, { param: `${label}.contents` });
    const datatype = input.datatype as Datatype;
    const shape = input.shape.map(Number);
    const declared = info.inputs.find((t) => t.name === input.name);
    if (declared !== undefined) checkShape(label, shape, declared.shape);
    const data = raw.length > 0 ? decodeRaw(datatype, raw[i]!, input.name) : typed(datatype, input.contents ?? {}, label);
    out[input.name] = tensor(datatype, shape, data, label);
  });
  if (info.kind === 'pipeline') checkFields(Object.entries(out).map(([name, t]) => ({ name, tensor: t })));
  return out;
}

/** The field of typed contents each datatype's elements come in. */
const FIELDS: Partial<Record<Datatype, keyof Contents>> = {
  BOOL: 'bool_contents', INT8: 'int_contents', INT16: 'int_contents', INT32: 'int_contents', INT64: 'int64_contents',
  UINT8: 'uint_contents', UINT16: 'uint_contents', UINT32: 'uint_contents', UINT64: 'uint64_contents',
  FP32: 'fp32_contents', FP64: 'fp64_contents', BYTES: 'bytes_contents',
};

/** The elements of typed contents, from the field the datatype uses (elements in another field are refused, naming the right one). */
function typed(datatype: Datatype, contents: Contents, label: string): Element[] {
  const field = FIELDS[datatype];
  const elsewhere = (Object.keys(contents) as Array<keyof Contents>).find((other) => other !== field && (contents[other]?.length ?? 0) > 0);
  if (elsewhere !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${label}.contents: ${datatype} elements go in ${field ?? 'raw_input_contents'}, got ${elsewhere}`, { param: `${label}.contents` });
  if (field === undefined) throw invalidArgument(`${label}.contents`, `raw_input_contents: ${datatype} has no typed contents field`, 'contents');
  const values = contents[field] ?? [];
  if (field === 'int64_contents' || field === 'uint64_contents') return (values as Long[]).map((v) => wideElement(BigInt(v)));
  if (field === 'bytes_contents') return (values as Buffer[]).map((b) => utf8(Buffer.from(b), label));
  return values as Element[];
}

/** Outputs as descriptions and raw buffers, in the order of `names`. */
export function responseTensors(outputs: TensorRecord, names: readonly string[]): { outputs: OutputMessage[]; raw: Buffer[] } {
  const described: OutputMessage[] = [];
  const raw: Buffer[] = [];
  for (const name of names) {
    const t: Tensor = outputs[name]!;
    described.push({ name, datatype: t.datatype, shape: t.shape });
    raw.push(encodeRaw(t.datatype, t.data));
  }
  return { outputs: described, raw };
}
