/**
 * KServe v2 gRPC tensors: a request's inputs from typed `contents` or from `raw_input_contents` (one
 * raw buffer per input, in order, in the binary extension's layout), and outputs as
 * `raw_output_contents`, as Triton answers (tritonclient.grpc reads them with as_numpy).
 */
import { DATATYPES, tensor, wideElement, type Datatype, type Element, type Tensor, type TensorRecord } from '../../serving/index.ts';
import { invalidArgument } from '../../errors.ts';
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

/** The inputs of a request as checked tensors by name. */
export function requestTensors(inputs: readonly InputMessage[], raw: readonly Buffer[]): TensorRecord {
  if (inputs.length === 0) throw invalidArgument('inputs', 'a non-empty list of tensors', inputs);
  if (raw.length > 0 && raw.length !== inputs.length) throw invalidArgument('raw_input_contents', `one buffer per input (${inputs.length})`, `${raw.length} buffers`);
  const out: TensorRecord = {};
  inputs.forEach((input, i) => {
    const label = `inputs[${i}] (${input.name})`;
    if (input.name === '') throw invalidArgument(`inputs[${i}].name`, 'a non-empty string', input.name);
    if (!DATATYPES.includes(input.datatype as Datatype)) throw invalidArgument(`${label}.datatype`, `one of ${DATATYPES.join(', ')}`, input.datatype);
    if (input.name in out) throw invalidArgument('inputs', 'tensors of different names', `${input.name} twice`);
    const datatype = input.datatype as Datatype;
    const shape = input.shape.map(Number);
    const data = raw.length > 0 ? decodeRaw(datatype, raw[i]!, input.name) : typed(datatype, input.contents ?? {}, label);
    out[input.name] = tensor(datatype, shape, data, label);
  });
  return out;
}

/** The elements of typed contents, from the field the datatype uses. */
function typed(datatype: Datatype, contents: Contents, label: string): Element[] {
  const wide = (values: Long[] | undefined): Element[] => (values ?? []).map((v) => wideElement(BigInt(v)));
  switch (datatype) {
    case 'BOOL': return contents.bool_contents ?? [];
    case 'INT8': case 'INT16': case 'INT32': return contents.int_contents ?? [];
    case 'INT64': return wide(contents.int64_contents);
    case 'UINT8': case 'UINT16': case 'UINT32': return contents.uint_contents ?? [];
    case 'UINT64': return wide(contents.uint64_contents);
    case 'FP32': return contents.fp32_contents ?? [];
    case 'FP64': return contents.fp64_contents ?? [];
    case 'BYTES': return (contents.bytes_contents ?? []).map((b) => utf8(Buffer.from(b), label));
    default: throw invalidArgument(`${label}.contents`, `raw_input_contents: ${datatype} has no typed contents field`, 'contents');
  }
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
