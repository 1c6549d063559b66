/**
 * Request files, as FasterTransformer's `issue_request.py` reads them, and tensors printed as its client
 * prints them. A file is a KServe v2 infer request (`{"inputs": [{"name", "shape", "datatype", "data"}],
 * "outputs"?}`) or FT's own shape (`{"config": {"model_name", "url"}, "request": [{"name", "data",
 * "dtype"}]}`, numpy dtype names, the shape read from the nesting of `data`). Integers beyond 2^53 are
 * read exactly.
 */
import { readFileSync } from 'node:fs';
import { DATATYPES, type Datatype } from '../config/index.ts';
import { tensor, type Tensor } from '../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../errors.ts';
import { parseExactJson } from '../util/exact-json.ts';

/** A request file, read. */
export interface RequestFile {
  /** The model FT's `config.model_name` or the request's `model_name` names, if any. */
  model?: string;
  /** The server FT's `config.url` names, if any (used when --url is not given). */
  url?: string;
  inputs: Record<string, Tensor>;
  /** Outputs the request asks for (all when absent). */
  outputs?: string[];
}

/** numpy dtype names (as FT's request files write them) -> KServe datatypes. */
const NUMPY: Record<string, Datatype> = {
  bool: 'BOOL', uint8: 'UINT8', uint16: 'UINT16', uint32: 'UINT32', uint64: 'UINT64', int8: 'INT8', int16: 'INT16', int32: 'INT32', int64: 'INT64',
  float16: 'FP16', float32: 'FP32', float64: 'FP64', bytes: 'BYTES', object: 'BYTES', str: 'BYTES',
};

/** Reads and checks a request file; errors name the file and the tensor. */
export function readRequestFile(path: string): RequestFile {
  let json: unknown;
  try {
    json = parseExactJson(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new ChorusError('CHORUS_FILE_INVALID', `request file ${path}: ${(error as Error).message}`, { param: '--request', cause: error });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw invalidArgument(`request file ${path}`, 'a JSON object with inputs (KServe) or request (FT)', json);
  const file = json as { inputs?: unknown; request?: unknown; outputs?: unknown; model_name?: unknown; config?: { model_name?: unknown; url?: unknown; protocol?: unknown; stream_api?: unknown } };
  if (file.config?.protocol !== undefined && file.config.protocol !== 'http') throw invalidArgument(`request file ${path}: config.protocol`, '"http" (chorus infer sends KServe v2 over HTTP)', file.config.protocol);
  if (file.config?.stream_api === true) throw invalidArgument(`request file ${path}: config.stream_api`, 'false (chorus infer answers once; stream with chorus client --stream or gRPC)', true);
  const entries = file.inputs ?? file.request;
  if (!Array.isArray(entries) || entries.length === 0) throw invalidArgument(`request file ${path}`, 'a non-empty list of tensors under inputs (KServe) or request (FT)', entries);
  const inputs: Record<string, Tensor> = {};
  entries.forEach((entry: unknown, i) => {
    const where = `request file ${path}: ${file.inputs === undefined ? 'request' : 'inputs'}[${i}]`;
    const t = entry as { name?: unknown; shape?: unknown; datatype?: unknown; dtype?: unknown; data?: unknown } | null;
    if (typeof t !== 'object' || t === null || typeof t.name !== 'string' || t.name === '') throw invalidArgument(where, 'a tensor with a name', entry);
    const datatype = typeof t.datatype === 'string' ? t.datatype : NUMPY[String(t.dtype)];
    if (!DATATYPES.includes(datatype as Datatype)) {
      throw invalidArgument(`${where} (${t.name})`, t.datatype === undefined ? `a dtype of ${Object.keys(NUMPY).join(', ')}` : `a datatype of ${DATATYPES.join(', ')}`, t.datatype ?? t.dtype);
    }
    const shape = Array.isArray(t.shape) ? (t.shape as number[]) : nestedShape(t.data);
    const data = Array.isArray(t.data) ? (t.data as unknown[]).flat(Infinity) : [t.data];
    inputs[t.name] = tensor(datatype as Datatype, shape, data as Tensor['data'], `${where} (${t.name})`);
  });
  const outputs = Array.isArray(file.outputs) ? (file.outputs as Array<{ name?: unknown }>).map((o) => String(o?.name)) : undefined;
  const model = typeof file.config?.model_name === 'string' ? file.config.model_name : typeof file.model_name === 'string' ? file.model_name : undefined;
  const url = typeof file.config?.url === 'string' ? file.config.url : undefined;
  return { inputs, ...(model === undefined ? {} : { model }), ...(url === undefined ? {} : { url }), ...(outputs === undefined ? {} : { outputs }) };
}

/** The shape nested lists give (a scalar: []). */
function nestedShape(value: unknown): number[] {
  const shape: number[] = [];
  for (let level = value; Array.isArray(level); level = level[0]) shape.push(level.length);
  return shape;
}

/** `name:\n<array>\n`, the array as numpy prints it: FT's issue_request.py output. */
export function formatOutput(name: string, t: Tensor): string {
  return `${name}:\n${formatArray(t)}\n\n`;
}

const LINE_WIDTH = 75;

/** A tensor as numpy's str() writes an array: nested brackets, aligned elements, wrapped at 75 columns. */
export function formatArray(t: Tensor): string {
  const texts = t.data.map((v) => element(v, t.datatype));
  const width = Math.max(0, ...texts.map((s) => s.length));
  const padded = t.datatype === 'BYTES' ? texts : texts.map((s) => s.padStart(width));
  if (t.shape.length === 0) return padded[0] ?? '';
  const block = (depth: number, offset: number): string => {
    const size = t.shape[depth]!;
    const stride = t.shape.slice(depth + 1).reduce((a, b) => a * b, 1);
    const indent = ' '.repeat(depth + 1);
    if (depth === t.shape.length - 1) {
      const lines: string[] = [];
      let line = '';
      for (let i = 0; i < size; i++) {
        const item = padded[offset + i]!;
        if (line !== '' && indent.length + line.length + 1 + item.length + 1 > LINE_WIDTH) {
          lines.push(line);
          line = item;
        } else line = line === '' ? item : `${line} ${item}`;
      }
      lines.push(line);
      return `[${lines.join(`\n${indent}`)}]`;
    }
    const gap = `${'\n'.repeat(t.shape.length - depth - 1)}${indent}`;
    return `[${Array.from({ length: size }, (_, i) => block(depth + 1, offset + i * stride)).join(gap)}]`;
  };
  return block(0, 0);
}

function element(v: Tensor['data'][number], datatype: Datatype): string {
  if (datatype === 'BYTES') return `b'${String(v).replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  if (typeof v === 'number' && /^(FP|BF)/.test(datatype)) {
    if (!Number.isFinite(v)) return Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
    const text = String(Number(v.toPrecision(8)));
    return text.includes('.') || text.includes('e') ? text : `${text}.`;
  }
  return String(v);
}
