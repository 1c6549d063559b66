/** Triton's generate extension over a fake engine client: validation, error shapes, pipelines and ensembles. */
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
const app = await buildServer({ client: fake, metrics: new Metrics() });
after(async () => {
  await app.close();
});
const post = (url: string, payload: unknown) => app.inject({ method: 'POST', url, payload: payload as Record<string, unknown> });

type Case = [body: unknown, status: number, message: RegExp];
const CASES: Case[] = [
  [[1], 400, /^body must be a JSON object, got \[1\]$/],
  [{ text_input: 5 }, 400, /^text_input must be a string \(or give messages\), got 5$/],
  [{ text_input: 'x', id: 3 }, 400, /^id must be a string, got 3$/],
  [{ text_input: 'x', parameters: 3 }, 400, /^parameters must be an object of fields, got 3$/],
  [{ text_input: 'x', parameters: { temperature: 'hot' } }, 400, /^parameters\.temperature must be a number >= 0, got "hot"$/],
  [{ text_input: 'x', temperature: -1 }, 400, /^temperature must be a number >= 0, got -1$/],
  [{ text_input: 'x', top_p: 2 }, 400, /^top_p must be a number in \(0, 1\], got 2$/],
  [{ text_input: 'x', presence_penalty: 3 }, 400, /^presence_penalty must be a number in \[-2, 2\], got 3$/],
  [{ text_input: 'x', max_tokens: 0 }, 400, /^max_tokens must be an integer >= 1, got 0$/],
  [{ text_input: 'x', top_logprobs: 21 }, 400, /^top_logprobs must be an integer in \[0, 20\], got 21$/],
  [{ text_input: 'x', logprobs: 'yes' }, 400, /^logprobs must be true or false, got "yes"$/],
  [{ text_input: 'x', stop: [''] }, 400, /^stop\[0\] must be a non-empty string, got ""$/],
  [{ text_input: 'x', n: 0 }, 400, /^n must be 1 \(generate answers one text; \/v1\/completions answers n\), got 0$/],
];

test(`${CASES.length} bad generate bodies: 400 and {"error": "..."} naming the field, on both routes`, async () => {
  for (const route of ['generate', 'generate_stream']) {
    for (const [body, status, message] of CASES) {
      const response = await post(`/v2/models/stories/${route}`, body);
      assert.equal(response.statusCode, status, `${route} ${JSON.stringify(body)}: ${response.body}`);
      const answer = response.json() as { error: string };
      assert.deepEqual(Object.keys(answer), ['error']);
      assert.match(answer.error, message, JSON.stringify(body));
    }
  }
  assert.equal(fake.generated.length, 0);
  const unknown = await post('/v2/models/nope/generate', { text_input: 'x' });
  assert.equal(unknown.statusCode, 404);
  assert.deepEqual(unknown.json(), { error: 'unknown model nope; generate serves pipelines and ensembles: stories, sum' });
});

test('a pipeline gets the fields and parameters as one text request; the answer and the stream agree', async () => {
  fake.generated.length = 0;
  const body = { id: 'r1', text_input: 'Once', max_tokens: 3, parameters: { temperature: 7, top_k: -1, custom: 'kept' } };
  const whole = await post('/v2/models/stories/generate', body);
  assert.equal(whole.statusCode, 200);
  assert.deepEqual(whole.json(), { model_name: 'stories', model_version: '1', id: 'r1', text_output: 'w0 w1 w2', finish_reason: 'length', usage: { prompt_tokens: 3, completion_tokens: 3 } });
  assert.deepEqual(fake.generated[0]!.request, { text_input: 'Once', custom: 'kept', max_tokens: 3, temperature: 7, top_k: 0, stream: false });
  const streamed = await post('/v2/models/stories/versions/1/generate_stream', body);
  assert.match(String(streamed.headers['content-type']), /^text\/event-stream/);
  const events = sseData(streamed.body).map((e) => JSON.parse(e) as { text_output: string; id: string });
  assert.equal(events.map((e) => e.text_output).join(''), 'w0 w1 w2');
  assert.ok(events.every((e) => e.id === 'r1'));
  assert.equal(fake.generated[1]!.request.stream, true);
});

test('an ensemble takes its inputs by name as tensors and answers its outputs by name', async () => {
  const response = await post('/v2/models/sum/generate', { x: [1, 2, 3] });
  assert.equal(response.statusCode, 200, response.body);
  assert.deepEqual(response.json(), { model_name: 'sum', model_version: '1', y: [1, 2, 3] });
  assert.deepEqual(fake.inferred.at(-1)!.inputs, { x: { datatype: 'INT32', shape: [1, 3], data: [1, 2, 3] } });
  const unknown = await post('/v2/models/sum/generate', { z: 1 });
  assert.equal(unknown.statusCode, 400);
  assert.deepEqual(unknown.json(), { error: 'ensemble sum has no input z; its inputs are: x' });
  const badType = await post('/v2/models/sum/generate', { x: ['a'] });
  assert.equal(badType.statusCode, 400);
  assert.match((badType.json() as { error: string }).error, /^x\.data\[0\] must be an integer/);
});

test('an error after the stream started is an SSE event {"error": ...}; a full queue before it is 503 with Retry-After', async () => {
  const failing = new FakeEngineClient({ pipelines: ['stories'], words: () => ['a', new ChorusError('CHORUS_INTERNAL', 'boom')] });
  const server = await buildServer({ client: failing, metrics: new Metrics() });
  const streamed = await server.inject({ method: 'POST', url: '/v2/models/stories/generate_stream', payload: { text_input: '' } });
  assert.deepEqual(sseData(streamed.body).map((e) => JSON.parse(e)), [{ model_name: 'stories', model_version: '1', text_output: 'a' }, { error: 'boom' }]);
  const overloaded = new FakeEngineClient({ pipelines: ['stories'], words: () => [new ChorusError('CHORUS_OVERLOADED', 'the queue is full')] });
  const busy = await buildServer({ client: overloaded, metrics: new Metrics() });
  const refused = await busy.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: '' } });
  assert.equal(refused.statusCode, 503);
  assert.equal(refused.headers['retry-after'], '1');
  assert.deepEqual(refused.json(), { error: 'the queue is full' });
  await Promise.all([server.close(), busy.close()]);
});

test('a refused request is logged at info, one line without a stack; a failure at error, with its stack', async () => {
  const lines: Array<{ level: number; msg: string; status?: number; err?: { stack?: string } }> = [];
  const stream = { write: (line: string) => lines.push(JSON.parse(line) as (typeof lines)[number]) };
  const failing = new FakeEngineClient({ pipelines: ['stories'], words: () => [new Error('disk on fire')] });
  const server = await buildServer({ client: failing, metrics: new Metrics(), logger: { level: 'info', stream } });
  assert.equal((await server.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: 'x', top_p: 2 } })).statusCode, 400);
  const refused = lines.filter((l) => l.msg === 'request refused');
  assert.equal(refused.length, 1);
  assert.equal(refused[0]!.level, 30);
  assert.equal(refused[0]!.status, 400);
  assert.equal(JSON.stringify(refused[0]).includes('stack'), false);
  assert.equal((await server.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: 'x' } })).statusCode, 500);
  const failed = lines.filter((l) => l.level === 50);
  assert.equal(failed.length, 1);
  assert.match(failed[0]!.err?.stack ?? '', /disk on fire/);
  await server.close();
});
