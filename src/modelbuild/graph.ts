/**
 * A small builder of ONNX graphs: values are names, `op()` adds a node and returns its output names,
 * weights become initializers in the build's float type, and `serialize()` writes a ModelProto. A
 * weight is kept as the tensor it was given (a checkpoint's are lazy) until `serialize()`, which
 * converts each in turn and embeds it or appends it to an external data file.
 */
import onnxProto from 'onnx-proto';
import type { ExternalDataFile } from './external-data.ts';
import { encodeFloats, FLOAT_WIDTH, type FloatType } from './float-bits.ts';
import type { RawTensor } from './quant/nbits.ts';
import { concatPieces, elementCount, encodedPieces, type Tensor } from './tensor.ts';

const { onnx } = onnxProto;
export type NodeProto = onnxProto.onnx.INodeProto;
type TensorProto = onnxProto.onnx.ITensorProto;
type ValueInfoProto = onnxProto.onnx.IValueInfoProto;
type AttributeProto = onnxProto.onnx.IAttributeProto;

/** Element types the builder uses. */
export type ElementType = FloatType | 'int64' | 'int32' | 'uint8' | 'bool';

/** ONNX's numbers of the element types (a Cast's `to`). */
export const ELEMENT_TYPES: Record<ElementType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float16: onnx.TensorProto.DataType.FLOAT16,
  bfloat16: onnx.TensorProto.DataType.BFLOAT16,
  int64: onnx.TensorProto.DataType.INT64,
  int32: onnx.TensorProto.DataType.INT32,
  uint8: onnx.TensorProto.DataType.UINT8,
  bool: onnx.TensorProto.DataType.BOOL,
};

/** A float attribute (plain numbers that are integers become INT attributes). */
export interface FloatAttribute {
  float: number;
}

/** A subgraph attribute (an If node's branches): its nodes, and the values it outputs. */
export interface GraphAttribute {
  graph: onnxProto.onnx.IGraphProto;
}

/** Attribute values: integers, floats (`{ float }`), strings, integer lists and subgraphs. */
export type AttributeValue = number | FloatAttribute | string | number[] | GraphAttribute;

/** A float attribute value. */
export function float(value: number): FloatAttribute {
  return { float: value };
}

/** A dimension: a fixed size or a symbolic name. */
export type Dim = number | string;

/** Options of `GraphBuilder.op`. */
export interface OpOptions {
  /** How many outputs the node has. Default: 1. */
  outputs?: number;
  /** The operator set domain, e.g. `com.microsoft`. Default: the ONNX domain. */
  domain?: string;
  /** A readable prefix for the node and output names. */
  name?: string;
}

/** The serialized model. */
export interface SerializedModel {
  model: Uint8Array;
}

/** Options of `GraphBuilder.serialize`. */
export interface SerializeOptions {
  /** Where weights over 1 KiB go; without it every weight is embedded (the model must stay under 2 GiB). */
  externalData?: ExternalDataFile;
  docString?: string;
  /** Called after each embedded weight with its size in bytes (external ones report through their file). */
  onEmbedded?: (bytes: number) => void;
}

/** The tensor each weight initializer is made of, until it is serialized. */
const sources = new WeakMap<TensorProto, Tensor>();
/** The bytes of each uint8 initializer (quantized weights), until it is serialized. */
const rawSources = new WeakMap<TensorProto, RawTensor>();

/** Weights up to this size stay in the model file. */
const EMBEDDED_WEIGHT_BYTES = 1024;

/** Builds one ONNX graph. */
export class GraphBuilder {
  private readonly nodes: NodeProto[] = [];
  private readonly initializers: TensorProto[] = [];
  private readonly inputs: ValueInfoProto[] = [];
  private readonly outputs: ValueInfoProto[] = [];
  private readonly constants = new Map<string, string>();
  private readonly counts = new Map<string, number>();
  private readonly domains = new Set<string>();

  /** In float16: round where PyTorch does (biases inside the products, SiLU in float32), at some cost in speed. */
  readonly pytorchRounding: boolean;

  /** Projections through the native addon's Linear operator (the slot models, which only the addon runs). */
  readonly addonLinear: boolean;

  /**
   * @param floatType the element type of weights and activations
   * @param options.pytorchRounding default true (the decoder models of both flavors); the slot models and
   *   the encoder-decoders' graphs turn it off
   * @param options.addonLinear default false: projections as MatMul (and Add)
   */
  constructor(
    readonly floatType: FloatType,
    options: { pytorchRounding?: boolean; addonLinear?: boolean } = {},
  ) {
    this.pytorchRounding = options.pytorchRounding ?? true;
    this.addonLinear = options.addonLinear ?? false;
  }

  /** Declares a graph input. */
  input(name: string, type: ElementType, dims: readonly Dim[]): string {
    this.inputs.push(valueInfo(name, type, dims));
    return name;
  }

  /** Declares `value` as the graph output `name`. */
  output(name: string, value: string, type: ElementType, dims: readonly Dim[]): void {
    if (value !== name) this.nodes.push({ opType: 'Identity', input: [value], output: [name], name: `${name}_identity` });
    this.outputs.push(valueInfo(name, type, dims));
  }

  /** True for the 16-bit float types, whose graphs compute some steps in float32. */
  get half(): boolean {
    return this.floatType !== 'float32';
  }

  /** `x` cast to the build's float type (a Cast node). */
  toFloatType(x: string): string {
    return this.op('Cast', [x], { to: ELEMENT_TYPES[this.floatType] });
  }

  /** Adds a weight as an initializer in the build's float type (its values are read when serialized); returns its name. */
  weight(name: string, tensor: Tensor): string {
    const proto: TensorProto = { name, dims: [...tensor.dims], dataType: ELEMENT_TYPES[this.floatType] };
    sources.set(proto, tensor);
    this.initializers.push(proto);
    return name;
  }

  /** Adds a uint8 initializer (a quantized weight) whose bytes are computed when serialized; returns its name. */
  rawWeight(name: string, raw: RawTensor): string {
    const proto: TensorProto = { name, dims: [...raw.dims], dataType: ELEMENT_TYPES.uint8 };
    rawSources.set(proto, raw);
    this.initializers.push(proto);
    return name;
  }

  /** An initializer `name` of the given values: a weight a graph computes (such as a rank's own offset), not a shared constant. */
  weightOf(name: string, type: ElementType, values: readonly number[], dims: readonly number[] = [values.length]): string {
    this.initializers.push(integerOrFloatTensor(name, type, values, dims));
    return name;
  }

  /** An int64 constant (shared between uses). */
  int64(values: readonly number[], dims: readonly number[] = [values.length]): string {
    return this.constant('int64', values, dims);
  }

  /** A constant of any element type, shared between uses. */
  constantOf(type: ElementType, values: readonly number[], dims: readonly number[] = [values.length]): string {
    return this.constant(type, values, dims);
  }

  /** A constant of the build's float type (or float32), shared between uses. */
  floatConstant(values: readonly number[], dims: readonly number[] = [values.length], type: FloatType = this.floatType): string {
    return this.constant(type, values, dims);
  }

  /**
   * Builds a subgraph (an If branch): `body` adds nodes to this builder as usual, then those nodes are
   * moved into the subgraph, which outputs `body`'s returned values under their own names. Subgraph
   * nodes may read any value of the enclosing graph (weights, inputs).
   */
  subgraph(name: string, body: () => string[], types: ReadonlyArray<{ type: ElementType; dims: readonly Dim[] }>): GraphAttribute {
    const first = this.nodes.length;
    const values = body();
    const nodes = this.nodes.splice(first);
    const output = values.map((value, i) => {
      const outName = `${name}_out_${i}`;
      nodes.push({ opType: 'Identity', input: [value], output: [outName], name: `${outName}_identity` });
      return valueInfo(outName, types[i]!.type, types[i]!.dims);
    });
    return { graph: { name, node: nodes, output } };
  }

  /**
   * Takes `inner`'s graph as a subgraph attribute (a GreedySearch decoder): its initializers become
   * this graph's (the subgraph reads them from the enclosing scope, so weights sit once in the model
   * and in their original order), its nodes, inputs and outputs the subgraph's.
   */
  adopt(inner: GraphBuilder, name: string): GraphAttribute {
    this.initializers.push(...inner.initializers.splice(0));
    for (const domain of inner.domains) this.domains.add(domain);
    for (const [prefix, n] of inner.counts) this.counts.set(prefix, Math.max(n, this.counts.get(prefix) ?? 0));
    for (const [key, value] of inner.constants) this.constants.set(key, value);
    return { graph: { name, node: inner.nodes.splice(0), input: inner.inputs.splice(0), output: inner.outputs.splice(0) } };
  }

  /** Adds a node; returns its single output, or all outputs with `outputs` > 1 via `opMany`. */
  op(type: string, inputs: ReadonlyArray<string>, attributes: Record<string, AttributeValue> = {}, options: OpOptions = {}): string {
    return this.opMany(type, inputs, attributes, { ...options, outputs: 1 })[0]!;
  }

  /** Adds a node with several outputs. An empty input name is an omitted optional input. */
  opMany(type: string, inputs: ReadonlyArray<string>, attributes: Record<string, AttributeValue> = {}, options: OpOptions = {}): string[] {
    const base = this.unique(options.name ?? type);
    const outputs = Array.from({ length: options.outputs ?? 1 }, (_, i) => (i === 0 ? base : `${base}:${i}`));
    const node: NodeProto = { opType: type, name: base, input: [...inputs], output: outputs, attribute: Object.entries(attributes).map(([k, v]) => attribute(k, v)) };
    if (options.domain) {
      node.domain = options.domain;
      this.domains.add(options.domain);
    }
    this.nodes.push(node);
    return outputs;
  }

  /**
   * Rewrites the graph's nodes (a fusion pass): `pass` gets them in order, with the names of the graph's
   * outputs, and returns the nodes that replace them, still in an order where each value is made
   * before it is read.
   */
  rewriteNodes(pass: (nodes: readonly NodeProto[], outputs: ReadonlySet<string>) => NodeProto[]): void {
    const next = pass(this.nodes, new Set(this.outputs.map((o) => o.name!)));
    this.nodes.splice(0, this.nodes.length, ...next);
  }

  /**
   * The ModelProto bytes. Each weight is read, converted to the build's float type and embedded, or,
   * with `externalData` and over 1 KiB, appended to that file (or pointed at, if the file has it).
   */
  serialize(options: SerializeOptions = {}): SerializedModel {
    const data = options.externalData;
    for (const tensor of this.initializers) {
      const raw = rawSources.get(tensor);
      if (raw !== undefined) {
        const length = elementCount(raw.dims);
        if (data !== undefined && length > EMBEDDED_WEIGHT_BYTES) {
          const { offset } = data.appendRaw(raw, length);
          tensor.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
          tensor.externalData = [
            { key: 'location', value: data.location },
            { key: 'offset', value: String(offset) },
            { key: 'length', value: String(length) },
          ];
        } else {
          tensor.rawData = raw.bytes();
          options.onEmbedded?.(length);
        }
        continue;
      }
      const source = sources.get(tensor);
      if (source === undefined) continue;
      const length = elementCount(source.dims) * FLOAT_WIDTH[this.floatType];
      if (data !== undefined && length > EMBEDDED_WEIGHT_BYTES) {
        const { offset } = data.append(source, this.floatType, length);
        tensor.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
        tensor.externalData = [
          { key: 'location', value: data.location },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(length) },
        ];
        tensor.rawData = undefined;
      } else {
        tensor.rawData = concatPieces([...encodedPieces(source, this.floatType)]);
        tensor.dataLocation = undefined;
        tensor.externalData = undefined;
        options.onEmbedded?.(length);
      }
    }
    const model = onnx.ModelProto.create({
      irVersion: 8,
      producerName: 'chorus',
      docString: options.docString ?? '',
      opsetImport: [{ domain: '', version: 17 }, ...[...this.domains].map((domain) => ({ domain, version: 1 }))],
      graph: { name: 'main', node: this.nodes, initializer: this.initializers, input: this.inputs, output: this.outputs },
    });
    return { model: onnx.ModelProto.encode(model).finish() };
  }

  private constant(type: ElementType, values: readonly number[], dims: readonly number[]): string {
    const key = `${type}:${dims.join('x')}:${values.join(',')}`;
    let name = this.constants.get(key);
    if (name === undefined) {
      name = this.unique('const');
      this.initializers.push(integerOrFloatTensor(name, type, values, dims));
      this.constants.set(key, name);
    }
    return name;
  }

  private unique(prefix: string): string {
    const n = this.counts.get(prefix) ?? 0;
    this.counts.set(prefix, n + 1);
    return n === 0 ? prefix : `${prefix}_${n}`;
  }
}

function valueInfo(name: string, type: ElementType, dims: readonly Dim[]): ValueInfoProto {
  return {
    name,
    type: { tensorType: { elemType: ELEMENT_TYPES[type], shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } } },
  };
}

function integerOrFloatTensor(name: string, type: ElementType, values: readonly number[], dims: readonly number[]): TensorProto {
  if (type === 'float32' || type === 'float16' || type === 'bfloat16') return { name, dims: [...dims], dataType: ELEMENT_TYPES[type], rawData: encodeFloats(Float32Array.from(values), type) };
  const data =
    type === 'int64'
      ? BigInt64Array.from(values.map((v) => BigInt(v)))
      : type === 'int32'
        ? Int32Array.from(values)
        : type === 'uint8'
          ? Uint8Array.from(values)
          : Uint8Array.from(values.map((v) => (v ? 1 : 0)));
  return { name, dims: [...dims], dataType: ELEMENT_TYPES[type], rawData: new Uint8Array(data.buffer) };
}

export function attribute(name: string, value: AttributeValue): AttributeProto {
  const types = onnx.AttributeProto.AttributeType;
  if (typeof value === 'string') return { name, type: types.STRING, s: Buffer.from(value, 'utf8') };
  if (Array.isArray(value)) return { name, type: types.INTS, ints: value };
  if (typeof value === 'object' && 'graph' in value) return { name, type: types.GRAPH, g: value.graph };
  if (typeof value === 'object') return { name, type: types.FLOAT, f: value.float };
  return { name, type: types.INT, i: value };
}
