/**
 * KServe v2 (Triton's HTTP protocol): server and model metadata, health, readiness, config, infer (JSON
 * and the binary tensor extension) and the repository API. Ensembles, pipelines and models all answer
 * as models: an ensemble's tensors are its inputs and outputs; a pipeline takes `text_input` (BYTES), and
 * its other request fields (`max_tokens`, `temperature`, ...) as one-element tensors of those names, and
 * answers `text_output` with `prompt_tokens` and `completion_tokens`; a model can be loaded and unloaded.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DATATYPES, type Datatype } from '../../config/index.ts';
import { tensor, type Element, type Tensor, type TensorRecord } from '../../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { Service, TextRequest } from '../../pipeline/index.ts';
import { cancelOnClose } from '../disconnect.ts';
import { decodeRaw, encodeRaw, utf8 } from './binary.ts';
import { VERSION as PACKAGE_VERSION } from '../../version.ts';

const VERSION = '1';

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

export function registerKserve(app: FastifyInstance, service: Service): void {
  app.get('/v2', async () => ({ name: 'chorus', version: PACKAGE_VERSION, extensions: ['binary_tensor_data', 'generate', 'model_repository'] }));
  app.get('/v2/health/live', async () => ({}));
  app.get('/v2/health/ready', async () => ({}));

  for (const prefix of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
    app.get<{ Params: ModelParams }>(prefix, async (request) => metadata(service, request.params.model));
    app.get<{ Params: ModelParams }>(`${prefix}/ready`, async (request, reply) => {
      metadata(service, request.params.model);
      return reply.code(200).send({});
    });
    app.get<{ Params: ModelParams }>(`${prefix}/config`, async (request) => config(service, request.params.model));
    app.post<{ Params: ModelParams }>(`${prefix}/infer`, async (request, reply) => infer(service, request, reply));
  }

  app.post('/v2/repository/index', async () =>
    service.store.index().map(({ name, state }) => ({ name, version: VERSION, state, ...(state === 'UNAVAILABLE' ? { reason: 'not loaded' } : {}) })),
  );
  app.post<{ Params: { model: string } }>('/v2/repository/models/:model/load', async (request) => {
    await service.store.load(request.params.model);
    return {};
  });
  app.post<{ Params: { model: string } }>('/v2/repository/models/:model/unload', async (request) => {
    await service.store.unload(request.params.model);
    return {};
  });
}

/** What a name answers as: an ensemble, a pipeline, or a model of the store. */
function target(service: Service, name: string): { kind: 'ensemble' | 'pipeline' | 'model' } {
  if (service.repository.ensembles.has(name)) return { kind: 'ensemble' };
  if (service.repository.pipelines.has(name)) return { kind: 'pipeline' };
  if (service.repository.models.has(name)) return { kind: 'model' };
  const all = [...service.repository.ensembles.keys(), ...service.repository.pipelines.keys(), ...service.repository.models.keys()];
  throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; there are: ${[...new Set(all)].sort().join(', ')}`, { param: 'model', value: name });
}

const PIPELINE_INPUTS = { text_input: { datatype: 'BYTES' as Datatype, dims: [1] } };
const PIPELINE_OUTPUTS = { text_output: { datatype: 'BYTES' as Datatype, dims: [-1] }, prompt_tokens: { datatype: 'INT32' as Datatype, dims: [1] }, completion_tokens: { datatype: 'INT32' as Datatype, dims: [1] } };

function metadata(service: Service, name: string): unknown {
  const { kind } = target(service, name);
  const io = (specs: Record<string, { datatype: Datatype; dims: number[] }>): unknown[] =>
    Object.entries(specs).map(([tensorName, spec]) => ({ name: tensorName, datatype: spec.datatype, shape: [-1, ...spec.dims] }));
  if (kind === 'ensemble') {
    const definition = service.repository.ensembles.get(name)!.value;
    return { name, versions: [VERSION], platform: 'ensemble', inputs: io(definition.inputs), outputs: io(definition.outputs) };
  }
  if (kind === 'pipeline') return { name, versions: [VERSION], platform: 'pipeline', inputs: io(PIPELINE_INPUTS), outputs: io(PIPELINE_OUTPUTS) };
  const model = service.repository.models.get(name)!.value;
  return { name, versions: [VERSION], platform: `chorus_${model.engine}`, inputs: io(model.inputs ?? {}), outputs: io(model.outputs ?? {}) };
}

function config(service: Service, name: string): unknown {
  const { kind } = target(service, name);
  const definition = kind === 'ensemble' ? service.repository.ensembles.get(name) : kind === 'pipeline' ? service.repository.pipelines.get(name) : service.repository.models.get(name);
  return { name, platform: kind, ...definition!.value };
}

async function infer(service: Service, request: FastifyRequest<{ Params: ModelParams }>, reply: FastifyReply): Promise<unknown> {
  const name = request.params.model;
  const { kind } = target(service, name);
  if (kind === 'model') throw new ChorusError('CHORUS_UNSUPPORTED', `${name} is a model; infer runs ensembles and pipelines (a model runs inside an ensemble step)`, { param: 'model' });
  const body = parseBody(request);
  const inputs = Object.fromEntries(body.inputs.map((input) => [input.name, input.tensor]));
  let outputs: TensorRecord;
  if (kind === 'ensemble') {
    const run = service.ensemble(name).run(inputs, { stream: false });
    outputs = await cancelOnClose(request, reply, run);
  } else {
    const { text_input: text, ...fields } = inputs;
    if (text === undefined || text.datatype !== 'BYTES' || text.data.length !== 1) throw invalidArgument('inputs.text_input', 'one BYTES element (the prompt)', text?.data);
    const textRequest: TextRequest = { text_input: text.data[0] as string, stream: false };
    for (const [field, t] of Object.entries(fields)) {
      if (t.data.length !== 1) throw invalidArgument(`inputs.${field}`, 'one element (a request field of the pipeline)', t.data);
      textRequest[field] = t.data[0];
    }
    const update = await cancelOnClose(request, reply, service.pipeline(name).run(textRequest));
    outputs = { text_output: { datatype: 'BYTES', shape: [1, update.choices.length], data: update.choices.map((c) => c.text) } };
    if (update.usage !== undefined) {
      outputs.prompt_tokens = { datatype: 'INT32', shape: [1, 1], data: [update.usage.promptTokens] };
      outputs.completion_tokens = { datatype: 'INT32', shape: [1, 1], data: [update.usage.completionTokens] };
    }
  }
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
  if (chunks.length === 0) return json;
  const header = Buffer.from(JSON.stringify(json), 'utf8');
  return reply.header('Inference-Header-Content-Length', header.length).type('application/octet-stream').send(Buffer.concat([header, ...chunks]));
}

/** The request's inputs as checked tensors, from JSON or from the binary extension. */
function parseBody(request: FastifyRequest): { id?: string; parameters?: InferRequestBody['parameters']; outputs?: InferRequestBody['outputs']; inputs: Array<{ name: string; tensor: Tensor }> } {
  const headerLength = request.headers['inference-header-content-length'];
  let body: unknown;
  let raw: Buffer | undefined;
  if (headerLength !== undefined) {
    const length = Number(headerLength);
    const buffer = request.body;
    if (!Buffer.isBuffer(buffer)) throw invalidArgument('Inference-Header-Content-Length', 'sent with a binary body (application/octet-stream)', headerLength);
    if (!Number.isInteger(length) || length < 0 || length > buffer.length) throw invalidArgument('Inference-Header-Content-Length', `an integer in [0, ${buffer.length}] (the body's size)`, headerLength);
    body = parseJson(utf8(buffer.subarray(0, length), 'the JSON header'));
    raw = buffer.subarray(length);
  } else {
    body = Buffer.isBuffer(request.body) ? parseJson(utf8(request.body, 'the request body')) : request.body;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidArgument('body', 'a JSON object with inputs', body);
  const b = body as Partial<InferRequestBody>;
  if (b.id !== undefined && typeof b.id !== 'string') throw invalidArgument('id', 'a string', b.id);
  if (!Array.isArray(b.inputs) || b.inputs.length === 0) throw invalidArgument('inputs', 'a non-empty list of tensors', b.inputs);
  if (b.outputs !== undefined && (!Array.isArray(b.outputs) || b.outputs.some((o) => typeof o?.name !== 'string'))) throw invalidArgument('outputs', 'a list of {name}', b.outputs);
  let offset = 0;
  const inputs = b.inputs.map((input: Partial<InferInput>, i) => {
    const where = `inputs[${i}]`;
    if (typeof input !== 'object' || input === null) throw invalidArgument(where, 'a tensor {name, shape, datatype, data}', input);
    if (typeof input.name !== 'string' || input.name === '') throw invalidArgument(`${where}.name`, 'a non-empty string', input.name);
    const label = `inputs[${i}] (${input.name})`;
    if (!DATATYPES.includes(input.datatype as Datatype)) throw invalidArgument(`${label}.datatype`, `one of ${DATATYPES.join(', ')}`, input.datatype);
    if (!Array.isArray(input.shape) || input.shape.some((d) => !Number.isInteger(d) || d < 0)) throw invalidArgument(`${label}.shape`, 'a list of non-negative integers', input.shape);
    const size = input.parameters?.binary_data_size;
    let data: Element[];
    if (size !== undefined) {
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
  const names = new Set<string>();
  for (const input of inputs) {
    if (names.has(input.name)) throw invalidArgument('inputs', 'tensors of different names', `${input.name} twice`);
    names.add(input.name);
  }
  return { id: b.id, parameters: b.parameters, outputs: b.outputs, inputs };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw invalidArgument('body', 'valid JSON', (error as Error).message);
  }
}
