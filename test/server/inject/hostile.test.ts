/**
 * Bodies and paths clients get wrong, or send to do harm, over a fake engine client: each is refused in
 * its protocol's error shape, naming what was wrong, and the server stays whole (no 500, nothing left
 * running, no metrics series for names it does not have).
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { ChorusError } from '../../../src/errors.ts';
import { buildServer, Metrics } from '../../../src/server/index.ts';
import { FakeEngineClient } from '../../helpers/fake-client.ts';
import { sseData } from '../../helpers/server.ts';

const fake = new FakeEngineClient({
  pipelines: ['stories'],
  ensembles: [{ name: 'sum', inputs: [{ name: 'x', datatype: 'INT32', shape: [-1, -1], optional: false }], outputs: [{ name: 'y', datatype: 'INT32', shape: [-1, -1], optional: false }] }],
});
const app = await buildServer({ client: fake, metrics: new Metrics(), bodyLimit: 64 * 1024 });
after(async () => {
  await app.close();
});
const raw = (url: string, payload: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }) => app.inject({ method: 'POST', url, payload, headers });
const post = (url: string, payload: unknown) => app.inject({ method: 'POST', url, payload: payload as Record<string, unknown> });

/** The error message of either protocol's shape, checked to be that shape. */
function message(body: string, openAi: boolean): string {
  const parsed = JSON.parse(body) as { error: string | { message: string; type: string; param: string | null; code: string } };
  if (!openAi) {
    assert.deepEqual(Object.keys(parsed), ['error'], body);
    assert.equal(typeof parsed.error, 'string', body);
    return parsed.error as string;
  }
  assert.deepEqual(Object.keys(parsed.error).sort(), ['code', 'message', 'param', 'type'], body);
  return (parsed.error as { message: string }).message;
}

/** JSON of `leaf` inside `depth` lists (written by hand: JSON.stringify itself overflows at such depths). */
const nested = (depth: number, leaf: string): string => `${'['.repeat(depth)}${leaf}${']'.repeat(depth)}`;

test('a body nested thousands deep is a 400 on every POST route, in its shape; 64 deep still reads', async () => {
  assert.ok(nested(5000, '1').length < 12_000, 'a small body');
  const bodies: Array<[string, string]> = [
    ['/v1/completions', `{"model":"stories","prompt":${nested(5000, '"x"')}}`],
    ['/v1/chat/completions', `{"model":"stories","messages":[{"role":"user","content":${nested(5000, '"x"')}}]}`],
    ['/v2/models/stories/generate', `{"text_input":${nested(5000, '"x"')}}`],
    ['/v2/models/stories/generate_stream', `{"stop":${nested(5000, '"x"')}}`],
    ['/v2/models/sum/infer', `{"inputs":[{"name":"x","datatype":"INT32","shape":[1,1],"data":${nested(5000, '1')}}]}`],
    ['/v2/models/sum/infer', `{"id":${nested(5000, '"q"')},"inputs":[]}`],
  ];
  for (const [url, body] of bodies) {
    const response = await raw(url, body);
    assert.equal(response.statusCode, 400, `${url}: ${response.body.slice(0, 200)}`);
    assert.equal(message(response.body, url.startsWith('/v1/')), 'body must nest arrays and objects at most 64 deep', url);
  }
  // A tensor's data nests as deep as its rank; 64 levels (the body, inputs, the tensor, 61 of data) pass.
  const shape = JSON.stringify(Array.from({ length: 62 }, () => 1));
  const ok = await raw('/v2/models/sum/infer', `{"inputs":[{"name":"x","datatype":"INT32","shape":${shape},"data":${nested(61, '1')}}]}`);
  assert.equal(ok.statusCode, 400, 'the shape is refused for its rank, not the body for its depth');
  assert.match(message(ok.body, false), /^inputs\[0\] \(x\)\.shape must be \[-1, -1\]/);
  assert.equal(fake.generated.length + fake.inferred.length, 0);
});

test('names the repository does not have make no metrics series; names it has do', async () => {
  const models = async (): Promise<string[]> => [...new Set([...(await app.inject('/metrics')).body.matchAll(/model="([^"]*)"/g)].map((m) => m[1]!))].sort();
  const before = await models();
  for (let i = 0; i < 30; i++) {
    await post('/v1/completions', { model: `junk-${i}`, prompt: 'x' });
    await post(`/v2/models/junk-${i}/generate`, { text_input: 'x' });
  }
  await post('/v1/completions', { model: '', prompt: 'x' });
  assert.deepEqual(await models(), before);
  assert.doesNotMatch((await app.inject('/metrics')).body, /junk/);
  await post('/v2/models/stories/generate', { text_input: 'x', max_tokens: 1 });
  assert.match((await app.inject('/metrics')).body, /nv_inference_request_success\{model="stories"\} 1\n/);
});

test('the OpenAI routes take application/json only: another content type is a 415 that says so', async () => {
  const body = JSON.stringify({ model: 'stories', prompt: 'x', max_tokens: 1 });
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/octet-stream']) {
    const response = await raw('/v1/completions', body, { 'content-type': type });
    assert.equal(response.statusCode, 415, type);
    assert.equal(message(response.body, true), `content-type must be application/json, got "${type}"`);
    assert.equal(JSON.parse(response.body).error.param, 'content-type');
  }
  const none = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
  assert.equal(none.statusCode, 415);
  assert.equal(message(none.body, true), 'content-type must be application/json, got none');
  const binary = await raw('/v1/chat/completions', body, { 'content-type': 'application/json', 'inference-header-content-length': '3' });
  assert.equal(binary.statusCode, 415);
  assert.equal((await raw('/v1/completions', body, { 'content-type': 'application/json; charset=utf-8' })).statusCode, 200);
  // The generate and infer routes read JSON whatever the type (curl -d), as Triton's do.
  assert.equal((await raw('/v2/models/stories/generate', JSON.stringify({ text_input: 'x', max_tokens: 1 }), { 'content-type': 'application/x-www-form-urlencoded' })).statusCode, 200);
});

test('a path that takes another method is a 405 with Allow; a path that cannot be read is a 400 in its shape', async () => {
  const get = await app.inject({ method: 'GET', url: '/v1/completions' });
  assert.deepEqual([get.statusCode, get.headers.allow], [405, 'POST']);
  assert.equal(message(get.body, true), '/v1/completions takes POST, not GET');
  const post405 = await app.inject({ method: 'POST', url: '/v2/models/stories/ready' });
  assert.deepEqual([post405.statusCode, post405.headers.allow], [405, 'GET']);
  assert.equal(message(post405.body, false), '/v2/models/stories/ready takes GET, not POST');
  const missing = await app.inject({ method: 'GET', url: '/v2/nothing' });
  assert.equal(missing.statusCode, 404);
  const badUrl = await app.inject({ method: 'GET', url: '/v2/models/%E0%A4%A/ready' });
  assert.equal(badUrl.statusCode, 400);
  assert.match(message(badUrl.body, false), /^the path must be a valid URL path \(percent-encoded UTF-8\), got "\/v2\/models\/%E0%A4%A\/ready"$/);
  const long = await app.inject({ method: 'GET', url: `/v2/models/${'m'.repeat(10_000)}/ready` });
  assert.equal(long.statusCode, 400);
  assert.equal(message(long.body, false), 'a name in the path is longer than 200 characters');
  const longOpenAi = await app.inject({ method: 'GET', url: `/v1/models/${'m'.repeat(10_000)}` });
  assert.equal(longOpenAi.statusCode, 400);
  assert.equal(message(longOpenAi.body, true), 'a name in the path is longer than 200 characters');
});

test('a body past the limit is a 413 that states the limit', async () => {
  const big = JSON.stringify({ model: 'stories', prompt: 'x'.repeat(70 * 1024) });
  const openAi = await raw('/v1/completions', big);
  assert.equal(openAi.statusCode, 413);
  assert.equal(message(openAi.body, true), 'the body must be at most 65536 bytes (the server\'s body limit)');
  const kserve = await raw('/v2/models/stories/generate', big);
  assert.equal(kserve.statusCode, 413);
  assert.equal(message(kserve.body, false), 'the body must be at most 65536 bytes (the server\'s body limit)');
});

test('values JSON cannot say exactly are named as sent: Infinity, a 5,000-digit integer; seeds past 2^53 stay exact', async () => {
  const infinite = await raw('/v1/completions', '{"model":"stories","prompt":"x","temperature":1e400}');
  assert.equal(infinite.statusCode, 400);
  assert.equal(message(infinite.body, true), 'temperature must be a number in [0, 2], got Infinity');
  const huge = await raw('/v1/completions', `{"model":"stories","prompt":"x","max_tokens":${'9'.repeat(5000)}}`);
  assert.equal(huge.statusCode, 400);
  const said = message(huge.body, true);
  assert.match(said, /^max_tokens must be an integer >= 1, got 9{57}\.\.\.$/);
  fake.generated.length = 0;
  const seeds = await post('/v1/completions', { model: 'stories', prompt: 'x', n: 3, seed: Number.MAX_SAFE_INTEGER, max_tokens: 1 });
  assert.equal(seeds.statusCode, 200, seeds.body);
  assert.deepEqual(
    fake.generated.map((g) => g.request.seed),
    [Number.MAX_SAFE_INTEGER, 2n ** 53n, 2n ** 53n + 1n],
  );
});

test('generate: stream must agree with the route; logprobs come back, every token whole and each delta\'s streamed', async () => {
  const streamOnGenerate = await post('/v2/models/stories/generate', { text_input: 'x', stream: true });
  assert.equal(streamOnGenerate.statusCode, 400);
  assert.equal(message(streamOnGenerate.body, false), 'stream must be false on generate (or left out): generate_stream streams, got true');
  const inParameters = await post('/v2/models/stories/generate_stream', { text_input: 'x', parameters: { stream: false } });
  assert.equal(inParameters.statusCode, 400);
  assert.equal(message(inParameters.body, false), 'stream must be true on generate_stream (or left out), got false');
  fake.generated.length = 0;
  const agreeing = await post('/v2/models/stories/generate', { text_input: 'x', stream: false, max_tokens: 1 });
  assert.equal(agreeing.statusCode, 200);
  assert.equal(fake.generated[0]!.request.stream, false);

  const whole = await post('/v2/models/stories/generate', { text_input: 'x', max_tokens: 2, logprobs: true, top_logprobs: 1 });
  assert.equal(whole.statusCode, 200, whole.body);
  assert.deepEqual(whole.json<{ logprobs: unknown }>().logprobs, [
    { token: 'w0', logprob: -1, top_logprobs: [{ token: 't0', logprob: -1 }] },
    { token: ' w1', logprob: -1, top_logprobs: [{ token: 't0', logprob: -1 }] },
  ]);
  const streamed = await post('/v2/models/stories/generate_stream', { text_input: 'x', max_tokens: 2, logprobs: true });
  const events = sseData(streamed.body).map((e) => JSON.parse(e) as { text_output: string; logprobs: unknown[] });
  assert.deepEqual(
    events.map((e) => [e.text_output, e.logprobs.length]),
    [
      ['w0', 1],
      [' w1', 1],
      ['', 0],
    ],
  );
  const without = await post('/v2/models/stories/generate', { text_input: 'x', max_tokens: 1 });
  assert.equal('logprobs' in without.json<object>(), false);
});

test('a version other than the model\'s is a 404 naming the versions it has, on every versioned route', async () => {
  for (const [method, url, body] of [
    ['GET', '/v2/models/sum/versions/9/ready', undefined],
    ['GET', '/v2/models/sum/versions/abc', undefined],
    ['GET', '/v2/models/sum/versions/2/config', undefined],
    ['POST', '/v2/models/sum/versions/7/infer', { inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 1], data: [1] }] }],
    ['POST', '/v2/models/stories/versions/2/generate', { text_input: 'x' }],
  ] as const) {
    const response = await app.inject({ method, url, ...(body === undefined ? {} : { payload: body }) });
    assert.equal(response.statusCode, 404, url);
    const version = /versions\/([^/]+)/.exec(url)![1];
    assert.match(message(response.body, false), new RegExp(`^(sum|stories) has no version "${version}"; its versions: 1$`), url);
  }
  assert.equal((await app.inject('/v2/models/sum/versions/1/ready')).statusCode, 200);
});

test('KServe infer refuses what it would otherwise ignore: wrong parameters, unknown fields, shapes, bounds, stray bytes', async () => {
  const x = { name: 'x', datatype: 'INT32', shape: [1, 1], data: [1] };
  const text = (shape: number[]) => ({ name: 'text_input', datatype: 'BYTES', shape, data: Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => 'hi') });
  const one = (name: string, datatype: string, value: unknown) => ({ name, datatype, shape: [1, 1], data: [value] });
  const cases: Array<[string, unknown, RegExp]> = [
    ['sum', { inputs: [x], parameters: 'x' }, /^parameters must be an object, got "x"$/],
    ['sum', { inputs: [x], parameters: { binary_data_output: 'yes' } }, /^parameters\.binary_data_output must be true or false, got "yes"$/],
    ['sum', { inputs: [{ ...x, parameters: 'x' }] }, /^inputs\[0\] \(x\)\.parameters must be an object, got "x"$/],
    ['sum', { inputs: [x], outputs: [{ name: 'y', parameters: { binary_data: 1 } }] }, /^outputs\[0\]\.parameters\.binary_data must be true or false, got 1$/],
    ['sum', { inputs: [x], model: 'sum' }, /^Unrecognized request argument supplied: model \(an infer body has id, parameters, inputs, outputs\)$/],
    ['sum', { inputs: [{ ...x, shape: [1, 1, 1] }] }, /^inputs\[0\] \(x\)\.shape must be \[-1, -1\] or \[-1\] without the batch dimension \(-1: any size\), got \[1, 1, 1\]$/],
    ['stories', { inputs: [text([])] }, /^inputs\[0\] \(text_input\)\.shape must be \[-1, 1\] or \[1\] without the batch dimension \(-1: any size\), got \[\]$/],
    ['stories', { inputs: [text([1, 1, 1])] }, /^inputs\[0\] \(text_input\)\.shape must be \[-1, 1\]/],
    ['stories', { inputs: [text([1, 2])] }, /^inputs\[0\] \(text_input\)\.shape must be \[-1, 1\]/],
    ['stories', { inputs: [text([1, 1]), one('presence_penalty', 'FP32', 5)] }, /^presence_penalty must be a number in \[-2, 2\], got 5$/],
    ['stories', { inputs: [text([1, 1]), one('top_p', 'FP32', 2)] }, /^top_p must be a number in \(0, 1\], got 2$/],
    ['stories', { inputs: [text([1, 1]), one('max_tokens', 'INT32', 0)] }, /^max_tokens must be an integer >= 1, got 0$/],
  ];
  fake.inferred.length = 0;
  for (const [model, body, expected] of cases) {
    const response = await post(`/v2/models/${model}/infer`, body);
    assert.equal(response.statusCode, 400, `${JSON.stringify(body)}: ${response.body}`);
    assert.match(message(response.body, false), expected, JSON.stringify(body));
  }
  assert.equal(fake.inferred.length, 0, 'none reached the client');
  assert.equal((await post('/v2/models/stories/infer', { inputs: [text([1])] })).statusCode, 200, 'the batch dimension may be left out');

  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 1], parameters: { binary_data_size: 4 } }] }));
  const junk = await raw('/v2/models/sum/infer', Buffer.concat([header, Buffer.alloc(4), Buffer.from('junk')]), { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) });
  assert.equal(junk.statusCode, 400);
  assert.equal(message(junk.body, false), 'the binary body holds 8 bytes after its JSON header, and its inputs\' binary_data_size take 4');
});

test('a binary body\'s JSON header is held to the same depth, and a tensor given both ways is refused', async () => {
  const header = Buffer.from(`{"inputs":[{"name":"x","datatype":"INT32","shape":[1,1],"data":${nested(20_000, '1')},"parameters":{"binary_data_size":4}}]}`);
  const deep = await raw('/v2/models/sum/infer', Buffer.concat([header, Buffer.alloc(4)]), { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) });
  assert.equal(deep.statusCode, 400);
  assert.equal(message(deep.body, false), 'the JSON header must nest arrays and objects at most 64 deep');
  const both = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 1], data: [7], parameters: { binary_data_size: 4 } }] }));
  const twice = await raw('/v2/models/sum/infer', Buffer.concat([both, Buffer.alloc(4)]), { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(both.length) });
  assert.equal(twice.statusCode, 400);
  assert.equal(message(twice.body, false), 'inputs[0] (x) gives both data and parameters.binary_data_size: give its elements one way');
});

test('a full queue answers a stream as it answers a whole request: 503 (429 on OpenAI routes) with Retry-After; streams keep CORS headers', async () => {
  const overloaded = new FakeEngineClient({ pipelines: ['stories'], words: () => [new ChorusError('CHORUS_OVERLOADED', 'the queue is full')] });
  const busy = await buildServer({ client: overloaded, metrics: new Metrics(), corsOrigin: 'http://example.com' });
  try {
    for (const [url, body, status] of [
      ['/v2/models/stories/generate_stream', { text_input: 'x' }, 503],
      ['/v1/completions', { model: 'stories', prompt: 'x', stream: true }, 429],
      ['/v1/chat/completions', { model: 'stories', messages: [{ role: 'user', content: 'x' }], stream: true }, 429],
      ['/v1/completions', { model: 'stories', prompt: 'x' }, 429],
    ] as const) {
      const response = await busy.inject({ method: 'POST', url, payload: body });
      assert.equal(response.statusCode, status, url);
      assert.equal(response.headers['retry-after'], '1', url);
      assert.equal(response.headers['access-control-allow-origin'], 'http://example.com', url);
      assert.equal(message(response.body, url.startsWith('/v1/')), 'the queue is full');
    }
  } finally {
    await busy.close();
  }
  const open = await buildServer({ client: new FakeEngineClient({ pipelines: ['stories'] }), metrics: new Metrics(), corsOrigin: 'http://example.com' });
  try {
    for (const [url, payload] of [
      ['/v2/models/stories/generate_stream', { text_input: 'x' }],
      ['/v1/completions', { model: 'stories', prompt: 'x', stream: true }],
    ] as const) {
      const streamed = await open.inject({ method: 'POST', url, payload });
      assert.equal(streamed.statusCode, 200, streamed.body);
      assert.match(String(streamed.headers['content-type']), /^text\/event-stream/);
      assert.equal(streamed.headers['access-control-allow-origin'], 'http://example.com', url);
    }
  } finally {
    await open.close();
  }
});

test('after all of it the server is whole: healthy, nothing running', async () => {
  assert.equal((await app.inject('/v2/health/live')).statusCode, 200);
  assert.equal(fake.active, 0);
});
