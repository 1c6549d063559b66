/**
 * KServe v2 (Triton's HTTP protocol): server and model metadata, health, readiness, config, infer (JSON
 * and the binary tensor extension) and the repository API. Ensembles, pipelines and models all answer
 * as models: an ensemble's tensors are its inputs and outputs; a pipeline takes `text_input` (BYTES), and
 * its other request fields (`max_tokens`, `temperature`, ...) as one-element tensors of those names, and
 * answers `text_output` with `prompt_tokens` and `completion_tokens`; a model can be loaded and unloaded.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ChorusError, invalidArgument } from '../../errors.ts';
import { DATATYPES, tensor, type Datatype, type Element, type EngineClient, type ModelInfo, type Tensor, type TensorInfo } from '../../serving/index.ts';
import { cancelOnClose } from '../disconnect.ts';
import { checkFields, checkShape, checkVersion, VERSION } from './checks.ts';
import { stringifyExactJson } from '../../util/exact-json.ts';
import { parseJsonBody } from '../json-body.ts';
import { decodeRaw, encodeRaw, utf8 } from './binary.ts';
import { VERSION as PACKAGE_VERSION } from '../../version.ts';

interface InferInput {
  name: string;
  shape: number[];
  datatype: Datatype;
  data?: unknown;
  parameters?: { binary_data_size?: number };
}

interface InferRequestBody {
  id?: string;
  parameters?: { binary_data_output?: boolean };
  inputs: InferInput[];
  outputs?: Array<{ name: string; parameters?: { binary_data?: boolean } }>;
}

type ModelParams = { model: string; version?: string };

export function registerKserve(app: FastifyInstance, client: EngineClient): void {
  app.get('/v2', async () => ({ name: 'chorus', version: PACKAGE_VERSION, extensions: ['binary_tensor_data', 'generate', 'model_repository'] }));
  app.get('/v2/health/live', async () => ({}));
  app.get('/v2/health/ready', async () => ({}));

  for (const prefix of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
    app.get<{ Params: ModelParams }>(prefix, async (request) => metadata(target(client, request.params)));
    app.get<{ Params: ModelParams }>(`${prefix}/ready`, async (request, reply) => {
      target(client, request.params);
      return reply.code(200).send({});
    });
    app.get<{ Params: ModelParams }>(`${prefix}/config`, async (request) => target(client, request.params).config);
    app.post<{ Params: ModelParams }>(`${prefix}/infer`, async (request, reply) => infer(client, request, reply));
  }

  app.post('/v2/repository/index', async () =>
    client.models('model').map(({ name, state }) => ({ name, version: VERSION, state, ...(state === 'UNAVAILABLE' ? { reason: 'not loaded' } : {}) })),
  );
  app.post<{ Params: { model: string } }>('/v2/repository/models/:model/load', async (request) => {
    await client.load(request.params.model);
    return {};
  });
  app.post<{ Params: { model: string } }>('/v2/repository/models/:model/unload', async (request) => {
    await client.unload(request.params.model);
    return {};
  });
}

/** What a path's name (and version) answers as: an ensemble, a pipeline, or a model of the store. */
function target(client: EngineClient, params: ModelParams): ModelInfo {
  const info = client.resolve(params.model, ['ensemble', 'pipeline', 'model']);
  checkVersion(info, params.version);
  return info;
}

function metadata(info: ModelInfo): unknown {
  const io = (tensors: TensorInfo[]): unknown[] => tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape }));
  return { name: info.name, versions: [info.version], platform: info.platform, inputs: io(info.inputs), outputs: io(info.outputs), random_weights: info.randomWeights };
}

async function infer(client: EngineClient, request: FastifyRequest<{ Params: ModelParams }>, reply: FastifyReply): Promise<unknown> {
  const name = request.params.model;
  const info = target(client, request.params);
  const body = parseBody(request, info);
  const inputs = Object.fromEntries(body.inputs.map((input) => [input.name, input.tensor]));
  const outputs = await cancelOnClose(request, reply, client.infer(name, inputs, { stream: false }));
  const wanted = body.outputs?.map((o) => o.name) ?? Object.keys(outputs);
  for (const output of wanted) if (!(output in outputs)) throw invalidArgument('outputs', `names of outputs of ${name} (${Object.keys(outputs).join(', ')})`, output);
  const binaryAll = body.parameters?.binary_data_output === true;
  const binary = new Set(wanted.filter((output) => binaryAll || body.outputs?.find((o) => o.name === output)?.parameters?.binary_data === true));
  const chunks: Buffer[] = [];
  const described = wanted.map((output) => {
    const t = outputs[output]!;
    if (!binary.has(output)) return { name: output, datatype: t.datatype, shape: t.shape, data: t.data };
    const raw = encodeRaw(t.datatype, t.data);
    chunks.push(raw);
    return { name: output, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: raw.length } };
  });
  const json = { model_name: name, model_version: VERSION, ...(body.id === undefined ? {} : { id: body.id }), outputs: described };
  // 64-bit integers beyond 2^53 are written exactly.
  if (chunks.length === 0) return reply.type('application/json').send(stringifyExactJson(json));
  const header = Buffer.from(stringifyExactJson(json), 'utf8');
  return reply.header('Inference-Header-Content-Length', header.length).type('application/octet-stream').send(Buffer.concat([header, ...chunks]));
}

/** The fields of an infer body, as KServe v2 has them. */
const BODY_FIELDS = ['id', 'parameters', 'inputs', 'outputs'];

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** A parameters object, where given: an object, its named boolean (if any) true or false. */
function checkParameters(where: string, parameters: unknown, flag?: string): void {
  if (parameters === undefined) return;
  if (!isObject(parameters)) throw invalidArgument(where, 'an object', parameters);
  if (flag !== undefined && parameters[flag] !== undefined && typeof parameters[flag] !== 'boolean') throw invalidArgument(`${where}.${flag}`, 'true or false', parameters[flag]);
}

/** The request's inputs as checked tensors, from JSON or from the binary extension. */
function parseBody(request: FastifyRequest, info: ModelInfo): { id?: string; parameters?: InferRequestBody['parameters']; outputs?: InferRequestBody['outputs']; inputs: Array<{ name: string; tensor: Tensor }> } {
  const headerLength = request.headers['inference-header-content-length'];
  let body: unknown;
  let raw: Buffer | undefined;
  if (headerLength !== undefined) {
    const length = Number(headerLength);
    const buffer = request.body;
    if (!Buffer.isBuffer(buffer)) throw invalidArgument('Inference-Header-Content-Length', 'sent with a binary body (application/octet-stream)', headerLength);
    if (!Number.isInteger(length) || length < 0 || length > buffer.length) throw invalidArgument('Inference-Header-Content-Length', `an integer in [0, ${buffer.length}] (the body's size)`, headerLength);
    body = parseJsonBody(utf8(buffer.subarray(0, length), 'the JSON header'), 'the JSON header');
    raw = buffer.subarray(length);
  } else {
    body = Buffer.isBuffer(request.body) ? parseJsonBody(utf8(request.body, 'the request body')) : request.body;
  }
  if (!isObject(body)) throw invalidArgument('body', 'a JSON object with inputs', body);
  const unknown = Object.keys(body).find((field) => !BODY_FIELDS.includes(field));
  if (unknown !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `Unrecognized request argument supplied: ${unknown} (an infer body has ${BODY_FIELDS.join(', ')})`, { param: unknown });
  const b = body as Partial<InferRequestBody>;
  if (b.id !== undefined && typeof b.id !== 'string') throw invalidArgument('id', 'a string', b.id);
  checkParameters('parameters', b.parameters, 'binary_data_output');
  if (!Array.isArray(b.inputs) || b.inputs.length === 0) throw invalidArgument('inputs', 'a non-empty list of tensors', b.inputs);
  if (b.outputs !== undefined && (!Array.isArray(b.outputs) || b.outputs.some((o) => typeof o?.name !== 'string'))) throw invalidArgument('outputs', 'a list of {name}', b.outputs);
  b.outputs?.forEach((o, i) => checkParameters(`outputs[${i}].parameters`, o.parameters, 'binary_data'));
  let offset = 0;
  const inputs = b.inputs.map((input: Partial<InferInput>, i) => {
    const where = `inputs[${i}]`;
    if (typeof input !== 'object' || input === null) throw invalidArgument(where, 'a tensor {name, shape, datatype, data}', input);
    if (typeof input.name !== 'string' || input.name === '') throw invalidArgument(`${where}.name`, 'a non-empty string', input.name);
    const label = `inputs[${i}] (${input.name})`;
    if (!DATATYPES.includes(input.datatype as Datatype)) throw invalidArgument(`${label}.datatype`, `one of ${DATATYPES.join(', ')}`, input.datatype);
    if (!Array.isArray(input.shape) || input.shape.some((d) => !Number.isInteger(d) || d < 0)) throw invalidArgument(`${label}.shape`, 'a list of non-negative integers', input.shape);
    const declared = info.inputs.find((t) => t.name === input.name);
    if (declared !== undefined) checkShape(label, input.shape, declared.shape);
    checkParameters(`${label}.parameters`, input.parameters);
    const size = input.parameters?.binary_data_size;
    let data: Element[];
    if (size !== undefined) {
      if (input.data !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${label} gives both data and parameters.binary_data_size: give its elements one way`, { param: `${label}.data` });
      if (raw === undefined) throw invalidArgument(`${label}.parameters.binary_data_size`, 'used only with a binary body (Inference-Header-Content-Length)', size);
      if (!Number.isInteger(size) || size < 0 || offset + size > raw.length) throw invalidArgument(`${label}.parameters.binary_data_size`, `an integer that fits the ${raw.length - offset} binary bytes left`, size);
      data = decodeRaw(input.datatype!, raw.subarray(offset, offset + size), input.name);
      offset += size;
    } else {
      if (input.data === undefined) throw invalidArgument(`${label}.data`, 'the tensor\'s elements (or parameters.binary_data_size)', undefined);
      data = (Array.isArray(input.data) ? (input.data as unknown[]).flat(Infinity) : [input.data]) as Element[];
    }
    return { name: input.name, tensor: tensor(input.datatype!, input.shape, data, label) };
  });
  if (raw !== undefined && offset !== raw.length) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `the binary body holds ${raw.length} bytes after its JSON header, and its inputs' binary_data_size take ${offset}`, { param: 'binary_data_size' });
  }
  const names = new Set<string>();
  for (const input of inputs) {
    if (names.has(input.name)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `inputs must be tensors of different names, got ${input.name} twice`, { param: 'inputs' });
    names.add(input.name);
  }
  if (info.kind === 'pipeline') checkFields(inputs);
  return { id: b.id, parameters: b.parameters, outputs: b.outputs, inputs };
}


