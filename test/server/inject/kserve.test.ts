/** KServe v2, the repository API, metrics, health and the API key over a fake engine client. */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { buildServer, Metrics } from '../../../src/server/index.ts';
import { FakeEngineClient } from '../../helpers/fake-client.ts';

const fake = new FakeEngineClient({
  pipelines: ['stories'],
  ensembles: [
    {
      name: 'sum',
      inputs: [{ name: 'x', datatype: 'INT32', shape: [-1, -1], optional: false }],
      outputs: [{ name: 'y', datatype: 'INT32', shape: [-1, 1], optional: false }, { name: 'label', datatype: 'BYTES', shape: [-1, 1], optional: false }],
      run: (inputs) => ({ y: { datatype: 'INT32', shape: [1, 1], data: [(inputs.x!.data as number[]).reduce((a, b) => a + b, 0)] }, label: { datatype: 'BYTES', shape: [1, 1], data: ['sum'] } }),
    },
  ],
  models: ['stories'],
});
const app = await buildServer({ client: fake, metrics: new Metrics(), apiKey: 'k' });
after(async () => {
  await app.close();
});
const auth = { authorization: 'Bearer k' };
const get = (url: string) => app.inject({ method: 'GET', url, headers: auth });
const post = (url: string, payload?: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url, headers: { ...auth, ...headers }, ...(payload === undefined ? {} : { payload: payload as Buffer }) });

test('server metadata, health, model metadata, readiness and config; unknown names 404 as {"error"}', async () => {
  assert.deepEqual((await get('/v2')).json(), { name: 'chorus', version: '0.1.0', extensions: ['binary_tensor_data', 'generate', 'model_repository'] });
  for (const path of ['/v2/health/live', '/v2/health/ready']) assert.equal((await app.inject(path)).statusCode, 200, `${path} needs no key`);
  assert.deepEqual((await get('/v2/models/sum')).json(), {
    name: 'sum',
    versions: ['1'],
    platform: 'ensemble',
    inputs: [{ name: 'x', datatype: 'INT32', shape: [-1, -1] }],
    outputs: [{ name: 'y', datatype: 'INT32', shape: [-1, 1] }, { name: 'label', datatype: 'BYTES', shape: [-1, 1] }],
    random_weights: false,
  });
  assert.equal((await get('/v2/models/stories/versions/1')).json<{ platform: string }>().platform, 'pipeline', 'a name that is a pipeline and a model answers as the pipeline');
  assert.equal((await get('/v2/models/sum/ready')).statusCode, 200);
  assert.deepEqual((await get('/v2/models/sum/config')).json(), { name: 'sum', platform: 'ensemble' });
  for (const path of ['/v2/models/nope', '/v2/models/nope/ready', '/v2/models/nope/config']) {
    const response = await get(path);
    assert.equal(response.statusCode, 404, path);
    assert.deepEqual(response.json(), { error: 'unknown model nope; there are: stories, sum' });
  }
});

test('infer in JSON: an ensemble\'s outputs by name, only those asked, with the request id', async () => {
  const response = await post('/v2/models/sum/infer', { id: 'q', inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 3], data: [[1, 2, 3]] }], outputs: [{ name: 'y' }] });
  assert.equal(response.statusCode, 200, response.body);
  assert.deepEqual(response.json(), { model_name: 'sum', model_version: '1', id: 'q', outputs: [{ name: 'y', datatype: 'INT32', shape: [1, 1], data: [6] }] });
  assert.equal(fake.inferred.at(-1)!.stream, false);
  const bad: Array<[unknown, RegExp]> = [
    [{}, /^inputs must be a non-empty list of tensors, got nothing$/],
    [{ inputs: [{ name: 'x', datatype: 'INT31', shape: [1], data: [1] }] }, /^inputs\[0\] \(x\)\.datatype must be one of BOOL/],
    [{ inputs: [{ name: 'x', datatype: 'INT32', shape: [2], data: [1] }] }, /^inputs\[0\] \(x\)\.data must hold 2 elements/],
    [{ inputs: [{ name: 'x', datatype: 'INT32', shape: [1], data: [1] }], outputs: [{ name: 'z' }] }, /^outputs must be names of outputs of sum \(y, label\), got "z"$/],
  ];
  for (const [body, message] of bad) {
    const refused = await post('/v2/models/sum/infer', body);
    assert.equal(refused.statusCode, 400, JSON.stringify(body));
    assert.match(refused.json<{ error: string }>().error, message);
  }
  const model = await post('/v2/models/stories/infer', { inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1, 1], data: ['x'] }] });
  assert.equal(model.statusCode, 200, 'a name that is a pipeline and a model runs the pipeline');
});

test('infer in the binary extension: raw inputs in, binary outputs out when asked', async () => {
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 2], parameters: { binary_data_size: 8 } }], outputs: [{ name: 'y', parameters: { binary_data: true } }, { name: 'label', parameters: { binary_data: true } }] }));
  const raw = Buffer.alloc(8);
  raw.writeInt32LE(40, 0);
  raw.writeInt32LE(2, 4);
  const response = await post('/v2/models/sum/infer', Buffer.concat([header, raw]), { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) });
  assert.equal(response.statusCode, 200, response.body);
  const length = Number(response.headers['inference-header-content-length']);
  const json = JSON.parse(response.rawPayload.subarray(0, length).toString()) as { outputs: Array<{ name: string; parameters: { binary_data_size: number } }> };
  assert.deepEqual(json.outputs.map((o) => [o.name, o.parameters.binary_data_size]), [['y', 4], ['label', 7]]);
  const body = response.rawPayload.subarray(length);
  assert.equal(body.readInt32LE(0), 42);
  assert.equal(body.readUInt32LE(4), 3);
  assert.equal(body.subarray(8).toString(), 'sum');
  const broken = await post('/v2/models/sum/infer', header, { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length + 5) });
  assert.equal(broken.statusCode, 400);
  assert.match(broken.json<{ error: string }>().error, /^Inference-Header-Content-Length must be an integer in \[0, \d+\]/);
});

test('a pipeline answers infer as text_output with token counts; a model alone is refused', async () => {
  const response = await post('/v2/models/stories/infer', { inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1, 1], data: ['hi'] }] });
  assert.deepEqual(response.json<{ outputs: Array<{ name: string; data: unknown[] }> }>().outputs.map((o) => [o.name, o.data]), [['text_output', ['echo hi']], ['prompt_tokens', [3]], ['completion_tokens', [2]]]);
  const only = new FakeEngineClient({ models: ['m'] });
  const server = await buildServer({ client: only, metrics: new Metrics() });
  const refused = await server.inject({ method: 'POST', url: '/v2/models/m/infer', payload: { inputs: [{ name: 'a', datatype: 'INT32', shape: [1], data: [1] }] } });
  assert.equal(refused.statusCode, 501);
  assert.match(refused.json<{ error: string }>().error, /^m is a model; infer runs ensembles and pipelines/);
  await server.close();
});

test('the repository API: index with states, load and unload through the client, unknown models 404', async () => {
  assert.deepEqual((await post('/v2/repository/index')).json(), [{ name: 'stories', version: '1', state: 'UNAVAILABLE', reason: 'not loaded' }]);
  assert.deepEqual((await post('/v2/repository/models/stories/load')).json(), {});
  assert.deepEqual((await post('/v2/repository/index')).json(), [{ name: 'stories', version: '1', state: 'READY' }]);
  assert.deepEqual((await post('/v2/repository/models/stories/unload')).json(), {});
  assert.deepEqual(fake.control, ['load stories', 'unload stories']);
  const missing = await post('/v2/repository/models/sum/load');
  assert.equal(missing.statusCode, 404, 'an ensemble is not a model of the store');
  assert.deepEqual(missing.json(), { error: 'unknown model sum; there are: stories' });
});

test('metrics: request counters per model, engine gauges from the client\'s stats, token histograms from finished requests', async () => {
  const client = new FakeEngineClient({ pipelines: ['stories'], models: ['stories'] });
  const server = await buildServer({ client, metrics: new Metrics() });
  await client.load('stories');
  await server.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: 'x', max_tokens: 2 } });
  await server.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: 'x', max_tokens: 0 } });
  client.finish({ model: 'stories', metrics: { queueMs: 2, timeToFirstTokenMs: 30, interTokenMs: [5, 6], tokens: 3, finishReason: 'length' } });
  const metrics = await server.inject('/metrics');
  assert.equal(metrics.statusCode, 200);
  assert.match(String(metrics.headers['content-type']), /^text\/plain; version=0.0.4/);
  const text = metrics.body;
  assert.match(text, /nv_inference_request_success\{model="stories"\} 1\n/);
  assert.match(text, /nv_inference_request_failure\{model="stories",reason="REJECTED"\} 1\n/, 'a body that fails its schema counts');
  assert.match(text, /chorus_engine_batch_occupancy\{model="stories"\} 2\n/);
  assert.match(text, /chorus_engine_prefill_steps\{model="stories"\} 2\n/);
  assert.match(text, /chorus_engine_decode_steps\{model="stories"\} 10\n/);
  assert.match(text, /chorus_engine_decoded_rows\{model="stories"\} 20\n/);
  assert.match(text, /chorus_time_to_first_token_seconds_count\{model="stories"\} 1\n/);
  assert.match(text, /chorus_inter_token_latency_seconds_count\{model="stories"\} 2\n/);
  assert.match(text, /nv_inference_queue_duration_us\{model="stories"\} 2000\n/);
  await server.close();
  assert.equal((await app.inject('/metrics')).statusCode, 200, 'metrics need no API key');
});

test('the API key guards every route but health, metrics and the page; errors keep each protocol\'s shape', async () => {
  const kserve = await app.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: 'x' } });
  assert.equal(kserve.statusCode, 401);
  assert.deepEqual(kserve.json(), { error: 'missing or wrong API key: send Authorization: Bearer <key>' });
  const openai = await app.inject({ method: 'GET', url: '/v1/models' });
  assert.equal(openai.statusCode, 401);
  assert.equal(openai.json<{ error: { type: string } }>().error.type, 'authentication_error');
  assert.equal((await app.inject('/')).statusCode, 200);
  const route = await get('/v3/nothing');
  assert.deepEqual([route.statusCode, route.json()], [404, { error: 'no route GET /v3/nothing' }]);
});
