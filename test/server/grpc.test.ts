/**
 * KServe v2 gRPC over a real socket, with a generic grpc-js client that loads the .proto itself and
 * shares no code with the server: every unary RPC, ModelInfer with raw contents (FT's INT32 tensors),
 * a decoupled stream whose text equals the HTTP answer, cancellation reaching the engine, and the key.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Engine } from '../../src/generation/index.ts';
import { parseSourceOverride } from '../../src/repository/index.ts';
import { PROTO_PATH, startGrpcServer, type GrpcServer } from '../../src/server/grpc/server.ts';
import { Metrics } from '../../src/server/index.ts';
import { tinyFtRepository } from '../helpers/ft-repository.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';

type Callback = (error: grpc.ServiceError | null, value: Record<string, unknown>) => void;
type Client = grpc.Client & Record<string, (request: unknown, metadata: grpc.Metadata, callback: Callback) => void> & { ModelStreamInfer(metadata: grpc.Metadata): grpc.ClientDuplexStream<unknown, StreamResponse> };
interface InferResponse {
  model_name: string;
  id: string;
  outputs: Array<{ name: string; datatype: string; shape: string[] }>;
  raw_output_contents: Buffer[];
  parameters: Record<string, { bool_param?: boolean }>;
}
interface StreamResponse {
  error_message: string;
  infer_response: InferResponse;
}

let http: TestServer;
let server: GrpcServer;
let client: Client;
const key = new grpc.Metadata();
key.set('authorization', 'Bearer k');

before(async () => {
  http = await startServer(tinyFtRepository(), { apiKey: 'k', sourceOverrides: [parseSourceOverride(`stories=${STORIES}/stories260K.bin`)] });
  server = await startGrpcServer({ engine: http.client, port: 0, apiKey: 'k' });
  const definition = protoLoader.loadSync(PROTO_PATH, { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  const Service = (grpc.loadPackageDefinition(definition) as unknown as { inference: { GRPCInferenceService: grpc.ServiceClientConstructor } }).inference.GRPCInferenceService;
  client = new Service(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure()) as unknown as Client;
});
after(async () => {
  client.close();
  await server.close();
  await http.close();
});

const call = (method: string, request: unknown, metadata = key): Promise<Record<string, unknown>> =>
  new Promise((resolve, reject) => client[method]!(request, metadata, (error, value) => (error ? reject(error) : resolve(value))));

const u32 = (values: number[]): Buffer => Buffer.concat(values.map((v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; }));
const int32s = (raw: Buffer): number[] => Array.from({ length: raw.length / 4 }, (_, i) => raw.readInt32LE(i * 4));

/** Every response of a ModelStreamInfer call that sends `requests` and ends its side. */
function streamed(...requests: unknown[]): Promise<StreamResponse[]> {
  const stream = client.ModelStreamInfer(key);
  const responses: StreamResponse[] = [];
  const ended = new Promise<StreamResponse[]>((resolve, reject) => {
    stream.on('data', (r: StreamResponse) => responses.push(r));
    stream.on('end', () => resolve(responses));
    stream.on('error', reject);
  });
  for (const request of requests) stream.write(request);
  stream.end();
  return ended;
}

describe('unary RPCs', () => {
  test('health, server and model metadata, readiness and configuration', async () => {
    assert.deepEqual(await call('ServerLive', {}, new grpc.Metadata()), { live: true });
    assert.deepEqual(await call('ServerReady', {}, new grpc.Metadata()), { ready: true });
    assert.equal((await call('ServerMetadata', {})).name, 'chorus');
    assert.deepEqual(await call('ModelReady', { name: 'stories' }), { ready: true });
    assert.deepEqual(await call('ModelReady', { name: 'bart-large-cnn' }), { ready: false }, 'a model not loaded yet');
    await assert.rejects(call('ModelReady', { name: 'nope' }), { code: grpc.status.NOT_FOUND, details: /unknown model nope/ });
    const meta = (await call('ModelMetadata', { name: 'fastertransformer' })) as { platform: string; inputs: Array<{ name: string; datatype: string; shape: string[] }>; outputs: Array<{ name: string; datatype: string }> };
    assert.equal(meta.platform, 'ensemble');
    assert.deepEqual(meta.inputs[0], { name: 'input_ids', datatype: 'UINT32', shape: ['-1', '-1'] });
    assert.deepEqual(meta.outputs.slice(0, 2).map((o) => `${o.name}:${o.datatype}`), ['output_ids:INT32', 'sequence_length:INT32']);
    const { config } = (await call('ModelConfig', { name: 'fastertransformer' })) as { config: { name: string; input: Array<{ name: string; data_type: string; dims: string[]; optional: boolean }>; model_transaction_policy: { decoupled: boolean } } };
    assert.equal(config.name, 'fastertransformer');
    assert.deepEqual(config.input.find((i) => i.name === 'random_seed'), { name: 'random_seed', data_type: 'TYPE_UINT64', dims: ['1'], optional: true });
    assert.equal(config.model_transaction_policy.decoupled, true);
  });

  test('the repository: index, load, unload', async () => {
    const state = async (name: string): Promise<string | undefined> => ((await call('RepositoryIndex', {})) as { models: Array<{ name: string; state: string }> }).models.find((m) => m.name === name)?.state;
    assert.equal(await state('gpt2'), 'UNAVAILABLE');
    assert.deepEqual(await call('RepositoryModelLoad', { model_name: 'gpt2' }), {});
    assert.equal(await state('gpt2'), 'READY');
    assert.deepEqual(((await call('RepositoryIndex', { ready: true })) as { models: Array<{ name: string }> }).models.map((m) => m.name), ['gpt2']);
    assert.deepEqual(await call('RepositoryModelUnload', { model_name: 'gpt2' }), {});
    assert.equal(await state('gpt2'), 'UNAVAILABLE');
    await assert.rejects(call('RepositoryModelLoad', { model_name: 'nope' }), { code: grpc.status.NOT_FOUND });
  });
});

describe('ModelInfer', () => {
  const request = {
    model_name: 'fastertransformer',
    id: 'r1',
    inputs: [
      { name: 'input_ids', datatype: 'UINT32', shape: [1, 4] },
      { name: 'input_lengths', datatype: 'UINT32', shape: [1, 1] },
      { name: 'request_output_len', datatype: 'UINT32', shape: [1, 1] },
      { name: 'beam_width', datatype: 'UINT32', shape: [1, 1] },
    ],
    raw_input_contents: [u32([10, 20, 30, 40]), u32([4]), u32([6]), u32([3])],
  };

  test('raw_input_contents in, FT\'s INT32 tensors out as raw_output_contents, as HTTP answers them', async () => {
    const answer = (await call('ModelInfer', request)) as unknown as InferResponse;
    assert.equal(answer.id, 'r1');
    assert.deepEqual(answer.outputs.map((o) => [o.name, o.datatype, o.shape.join()]), [['output_ids', 'INT32', '1,3,10'], ['sequence_length', 'INT32', '1,3']]);
    const viaHttp = (await (await fetch(`${http.url}/v2/models/fastertransformer/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
      body: JSON.stringify({ inputs: [
        { name: 'input_ids', datatype: 'UINT32', shape: [1, 4], data: [10, 20, 30, 40] },
        { name: 'input_lengths', datatype: 'UINT32', shape: [1, 1], data: [4] },
        { name: 'request_output_len', datatype: 'UINT32', shape: [1, 1], data: [6] },
        { name: 'beam_width', datatype: 'UINT32', shape: [1, 1], data: [3] },
      ] }),
    })).json()) as { outputs: Array<{ name: string; data: number[] }> };
    assert.deepEqual(int32s(answer.raw_output_contents[0]!), viaHttp.outputs.find((o) => o.name === 'output_ids')!.data);
    assert.deepEqual(int32s(answer.raw_output_contents[1]!), viaHttp.outputs.find((o) => o.name === 'sequence_length')!.data);
  });

  test('typed contents give the same answer; requested outputs only; bad input is INVALID_ARGUMENT', async () => {
    const raw = (await call('ModelInfer', request)) as unknown as InferResponse;
    const typed = (await call('ModelInfer', {
      ...request,
      raw_input_contents: [],
      inputs: request.inputs.map((input, i) => ({ ...input, contents: { uint_contents: [[10, 20, 30, 40], [4], [6], [3]][i] } })),
      outputs: [{ name: 'output_ids' }],
    })) as unknown as InferResponse;
    assert.deepEqual(typed.outputs.map((o) => o.name), ['output_ids']);
    assert.deepEqual(typed.raw_output_contents[0], raw.raw_output_contents[0]);
    await assert.rejects(call('ModelInfer', { ...request, raw_input_contents: [u32([10, 20, 30, 40])] }), { code: grpc.status.INVALID_ARGUMENT, details: /raw_input_contents must be one buffer per input \(4\)/ });
  });
});

describe('ModelStreamInfer (decoupled)', () => {
  const prompt = (text: string, maxTokens: number) => ({
    model_name: 'stories',
    id: text,
    inputs: [
      { name: 'text_input', datatype: 'BYTES', shape: [1, 1] },
      { name: 'max_tokens', datatype: 'INT32', shape: [1, 1], contents: { int_contents: [maxTokens] } },
      { name: 'temperature', datatype: 'FP32', shape: [1, 1], contents: { fp32_contents: [0] } },
    ].map((input) => (input.name === 'text_input' ? { ...input, contents: { bytes_contents: [Buffer.from(text)] } } : input)),
  });

  test('one response per step whose texts join to the HTTP answer, then a final response', async () => {
    const responses = await streamed(prompt('Once upon a time', 24));
    assert.ok(responses.every((r) => r.error_message === ''), JSON.stringify(responses.slice(0, 3)));
    const steps = responses;
    assert.ok(steps.length >= 10, `a response per step (${steps.length})`);
    assert.deepEqual(steps.map((r) => r.infer_response.parameters.triton_final_response!.bool_param), [...steps.slice(1).map(() => false), true], 'the last response is the final one');
    assert.ok(steps.every((r) => r.infer_response.id === 'Once upon a time'));
    const text = steps
      .map((r) => {
        const raw = r.infer_response.raw_output_contents[r.infer_response.outputs.findIndex((o) => o.name === 'text_output')]!;
        return raw.subarray(4, 4 + raw.readUInt32LE(0)).toString();
      })
      .join('');
    const viaHttp = (await (await fetch(`${http.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: JSON.stringify({ text_input: 'Once upon a time', max_tokens: 24, temperature: 0 }) })).json()) as { text_output: string };
    assert.equal(text, viaHttp.text_output);
    assert.ok(text.length > 20);
    const usage = steps.at(-1)!.infer_response.outputs.map((o) => o.name);
    assert.ok(usage.includes('completion_tokens'), 'the last step carries the usage');
  });

  test('with triton_enable_empty_final_response, responses come as they are made and an empty one ends the request', async () => {
    const responses = await streamed({ ...prompt('Lily', 6), parameters: { triton_enable_empty_final_response: { bool_param: true } } });
    const final = responses.at(-1)!;
    assert.equal(final.infer_response.parameters.triton_final_response!.bool_param, true);
    assert.deepEqual(final.infer_response.outputs, []);
    assert.ok(responses.length > 2);
    assert.ok(responses.slice(0, -1).every((r) => r.infer_response.parameters.triton_final_response!.bool_param === false && r.infer_response.outputs.length > 0));
  });

  test('a failing request answers error_message and the stream goes on', async () => {
    const responses = await streamed({ ...prompt('x', 2), model_name: 'nope' }, prompt('Lily', 2));
    assert.match(responses[0]!.error_message, /unknown model nope/);
    assert.equal(responses.at(-1)!.infer_response.parameters.triton_final_response!.bool_param, true);
  });

  test('a cancelled stream stops its generation: the engine runs nothing after', async () => {
    const stream = client.ModelStreamInfer(key);
    const first = new Promise<void>((resolve) => stream.once('data', () => resolve()));
    stream.on('error', () => {});
    stream.write(prompt('Once upon a time', 400));
    await first;
    const engine = (await http.service.store.model('stories')) as { generator: Engine };
    assert.equal(engine.generator.stats().running, 1, 'generating when the client cancels');
    stream.cancel();
    for (let i = 0; i < 200 && engine.generator.stats().running > 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(engine.generator.stats().running, 0);
    assert.equal(engine.generator.stats().waiting, 0);
  });
});

describe('client mistakes get the answers HTTP gives them', () => {
  const text = (shape: number[], extra: Record<string, unknown> = {}) => ({ name: 'text_input', datatype: 'BYTES', shape, contents: { bytes_contents: [Buffer.from('Once')] }, ...extra });
  const field = (name: string, datatype: string, contents: Record<string, unknown>) => ({ name, datatype, shape: [1, 1], contents });

  test('versions, names, shapes, pipeline fields and contents: each refused naming what was wrong', async () => {
    await assert.rejects(call('ModelReady', { name: 'stories', version: '9' }), { code: grpc.status.NOT_FOUND, details: 'stories has no version "9"; its versions: 1' });
    await assert.rejects(call('ModelMetadata', { name: 'stories', version: '2' }), { code: grpc.status.NOT_FOUND });
    await assert.rejects(call('ModelConfig', { name: '' }), { code: grpc.status.INVALID_ARGUMENT, details: /^name must be the name of a pipeline, ensemble or model/ });
    assert.deepEqual(await call('ModelReady', { name: 'stories', version: '1' }), { ready: true });
    const infer = (inputs: unknown[], extra: Record<string, unknown> = {}) => call('ModelInfer', { model_name: 'stories', inputs, ...extra });
    const cases: Array<[Promise<unknown>, number, RegExp]> = [
      [infer([text([1, 1])], { model_version: '9' }), grpc.status.NOT_FOUND, /^stories has no version "9"; its versions: 1$/],
      [infer([text([])]), grpc.status.INVALID_ARGUMENT, /^inputs\[0\] \(text_input\)\.shape must be \[-1, 1\] or \[1\] without the batch dimension \(-1: any size\), got \[\]$/],
      [infer([text([1, 1, 1])]), grpc.status.INVALID_ARGUMENT, /^inputs\[0\] \(text_input\)\.shape must be \[-1, 1\]/],
      [infer([text([1, 1]), field('presence_penalty', 'FP32', { fp32_contents: [5] })]), grpc.status.INVALID_ARGUMENT, /^presence_penalty must be a number in \[-2, 2\], got 5$/],
      [infer([text([1, 1]), field('repetition_penalty', 'FP32', { fp32_contents: [3] })]), grpc.status.INVALID_ARGUMENT, /^repetition_penalty must be a number in \(0, 2\], got 3$/],
      [infer([text([1, 1]), field('stream', 'INT32', { int_contents: [7] })]), grpc.status.INVALID_ARGUMENT, /^stream must be one BOOL element, true or false, got 7$/],
      [infer([text([1, 1]), field('max_tokens', 'INT32', { fp32_contents: [3] })]), grpc.status.INVALID_ARGUMENT, /^inputs\[1\] \(max_tokens\)\.contents: INT32 elements go in int_contents, got fp32_contents$/],
      [infer([text([1, 1])], { raw_input_contents: [Buffer.from([4, 0, 0, 0, 79, 110, 99, 101])] }), grpc.status.INVALID_ARGUMENT, /^inputs\[0\] \(text_input\) gives both contents and raw_input_contents: give its elements one way$/],
      [infer([text([1, 1])], { outputs: [{ name: 'nope' }] }), grpc.status.INVALID_ARGUMENT, /^outputs must be names of outputs of stories \(text_output, prompt_tokens, completion_tokens\), got "nope"$/],
    ];
    for (const [refused, code, details] of cases) await assert.rejects(refused, (error: grpc.ServiceError) => error.code === code && details.test(error.details), String(details));
  });

  test('a stream asking for the token counts gets them with its last response, the text with every one', async () => {
    const responses = await streamed({ model_name: 'stories', id: 'counts', inputs: [text([1, 1]), field('max_tokens', 'INT32', { int_contents: [5] })], outputs: [{ name: 'text_output' }, { name: 'completion_tokens' }] });
    assert.ok(responses.every((r) => r.error_message === ''), responses.map((r) => r.error_message).join('; '));
    assert.ok(responses.length > 2);
    assert.ok(responses.slice(0, -1).every((r) => r.infer_response.outputs.map((o) => o.name).join() === 'text_output'));
    const last = responses.at(-1)!.infer_response;
    assert.deepEqual(last.outputs.map((o) => o.name), ['text_output', 'completion_tokens']);
    assert.equal(last.raw_output_contents[1]!.readInt32LE(0), 5);
  });

  test('inference calls count in the request metrics HTTP keeps, by model', async () => {
    const metrics = new Metrics();
    const counted = await startGrpcServer({ engine: http.client, port: 0, metrics });
    const Service = client.constructor as unknown as new (address: string, credentials: grpc.ChannelCredentials) => Client;
    const other = new Service(`127.0.0.1:${counted.port}`, grpc.credentials.createInsecure());
    try {
      const once = (request: unknown) => new Promise<void>((resolve) => other.ModelInfer!(request, new grpc.Metadata(), () => resolve()));
      await once({ model_name: 'stories', inputs: [text([1, 1]), field('max_tokens', 'INT32', { int_contents: [2] })] });
      await once({ model_name: 'stories', inputs: [text([])] });
      await once({ model_name: 'nope', inputs: [text([1, 1])] });
      const exposed = await metrics.text();
      assert.match(exposed, /nv_inference_request_success\{model="stories"\} 1\n/);
      assert.match(exposed, /nv_inference_request_failure\{model="stories",reason="REJECTED"\} 1\n/);
      assert.doesNotMatch(exposed, /model="nope"/);
    } finally {
      other.close();
      await counted.close();
    }
  });
});

test('without the key: UNAUTHENTICATED, unary and streamed', async () => {
  await assert.rejects(call('ModelMetadata', { name: 'stories' }, new grpc.Metadata()), { code: grpc.status.UNAUTHENTICATED, details: /missing or wrong API key/ });
  const wrong = new grpc.Metadata();
  wrong.set('authorization', 'Bearer nope');
  await assert.rejects(call('ModelInfer', { model_name: 'stories' }, wrong), { code: grpc.status.UNAUTHENTICATED });
  const stream = client.ModelStreamInfer(new grpc.Metadata());
  const error = await new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
  assert.equal(error.code, grpc.status.UNAUTHENTICATED);
});

test('chorus serve answers gRPC on --grpc-port beside HTTP, and stops both on SIGTERM', async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address() as AddressInfo;
      probe.close(() => resolve(free));
    });
  });
  const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', '--repository', join(ROOT, 'test/fixtures/repositories/ensembles'), '--port', '0', '--grpc-port', String(port), '--quiet'], { cwd: ROOT });
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (/serving .* on http:\/\/[\d.:]+ and gRPC port \d+/.test(stderr)) resolve();
    });
    child.on('exit', () => reject(new Error(`the server exited early: ${stderr}`)));
  });
  assert.match(stderr, new RegExp(`gRPC port ${port} `));
  const definition = protoLoader.loadSync(PROTO_PATH, { keepCase: true, longs: String, defaults: true });
  const Service = (grpc.loadPackageDefinition(definition) as unknown as { inference: { GRPCInferenceService: grpc.ServiceClientConstructor } }).inference.GRPCInferenceService;
  const served = new Service(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
  const meta = await new Promise<Record<string, unknown>>((resolve, reject) => served.ModelMetadata!({ name: 'stories' }, new grpc.Metadata(), (error, value) => (error ? reject(error) : resolve(value))));
  assert.equal(meta.platform, 'pipeline');
  served.close();
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
});
