/** The OpenAI routes over a fake engine client: validation, error shapes, and the mapping to text requests. */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { ChorusError } from '../../../src/errors.ts';
import { buildServer, Metrics } from '../../../src/server/index.ts';
import { FakeEngineClient } from '../../helpers/fake-client.ts';
import { sseData } from '../../helpers/server.ts';

const fake = new FakeEngineClient({ pipelines: ['stories', 'gpt'], ensembles: [], models: ['stories'] });
const app = await buildServer({ client: fake, metrics: new Metrics() });
after(async () => {
  await app.close();
});
const post = (url: string, payload: unknown) => app.inject({ method: 'POST', url, payload: payload as Record<string, unknown> });
const chat = (extra: Record<string, unknown> = {}) => ({ model: 'stories', messages: [{ role: 'user', content: 'hi' }], ...extra });
const completion = (extra: Record<string, unknown> = {}) => ({ model: 'stories', prompt: 'hi', ...extra });

type Case = [path: string, body: unknown, status: number, param: string | null, message: RegExp];
const C = '/v1/completions';
const H = '/v1/chat/completions';
const CASES: Case[] = [
  [C, { prompt: 'x' }, 400, 'model', /^model must be the name of a model \(a pipeline\), got nothing$/],
  [C, completion({ model: '' }), 400, 'model', /^model must be the name of a model/],
  [C, completion({ model: 'nope' }), 404, 'model', /^The model `nope` does not exist; models: gpt, stories$/],
  [C, completion({ prompt: 5 }), 400, 'prompt', /^prompt must be a string or a non-empty list of strings, got 5$/],
  [C, completion({ prompt: [] }), 400, 'prompt', /^prompt must be a string or a non-empty list of strings, got \[\]$/],
  [C, completion({ temperature: 2.5 }), 400, 'temperature', /^temperature must be a number in \[0, 2\], got 2.5$/],
  [C, completion({ temperature: -0.1 }), 400, 'temperature', /^temperature must be a number in \[0, 2\]/],
  [C, completion({ top_p: 0 }), 400, 'top_p', /^top_p must be a number in \(0, 1\], got 0$/],
  [C, completion({ top_p: 1.01 }), 400, 'top_p', /^top_p must be a number in \(0, 1\]/],
  [C, completion({ presence_penalty: 2.5 }), 400, 'presence_penalty', /^presence_penalty must be a number in \[-2, 2\], got 2.5$/],
  [C, completion({ frequency_penalty: -3 }), 400, 'frequency_penalty', /^frequency_penalty must be a number in \[-2, 2\], got -3$/],
  [C, completion({ repetition_penalty: 0 }), 400, 'repetition_penalty', /^repetition_penalty must be a number in \(0, 2\]/],
  [C, completion({ max_tokens: 0 }), 400, 'max_tokens', /^max_tokens must be an integer >= 1, got 0$/],
  [C, completion({ max_tokens: 1.5 }), 400, 'max_tokens', /^max_tokens must be an integer >= 1, got 1.5$/],
  [C, completion({ max_completion_tokens: -1 }), 400, 'max_completion_tokens', /^max_completion_tokens must be an integer >= 1/],
  [C, completion({ top_k: -2 }), 400, 'top_k', /^top_k must be an integer >= -1/],
  [C, completion({ seed: -1 }), 400, 'seed', /^seed must be an integer in \[0, 2\^53 - 1\], got -1$/],
  [C, completion({ n: 0 }), 400, 'n', /^n must be an integer in \[1, 16\], got 0$/],
  [C, completion({ n: 17 }), 400, 'n', /^n must be an integer in \[1, 16\], got 17$/],
  [C, completion({ stream: 'yes' }), 400, 'stream', /^stream must be true or false, got "yes"$/],
  [C, completion({ stream_options: 'x' }), 400, 'stream_options', /^stream_options must be an object \{include_usage\}, with stream: true, got "x"$/],
  [C, completion({ stream: true, stream_options: { include_usage: 'x' } }), 400, 'stream_options.include_usage', /^stream_options\.include_usage must be true or false, got "x"$/],
  [C, completion({ stream: true, stream_options: { foo: 1 } }), 400, 'stream_options.foo', /^Unrecognized request argument supplied: foo$/],
  [C, completion({ stream_options: { include_usage: true } }), 400, 'stream_options', /^stream_options must be given only with stream: true, got \{"include_usage":true\}$/],
  [C, completion({ min_tokens: 10, max_tokens: 2 }), 400, 'min_tokens', /^min_tokens must be at most max_tokens \(2\), got 10$/],
  [C, completion({ min_tokens: 10, max_completion_tokens: 2 }), 400, 'min_tokens', /^min_tokens must be at most max_tokens \(2\), got 10$/],
  [C, completion({ prompt: Array.from({ length: 1025 }, () => 'x') }), 400, 'prompt', /^1025 prompts times n 1 make 1025 completions; a request makes at most 1024$/],
  [C, completion({ prompt: [5] }), 400, 'prompt[0]', /^prompt\[0\] must be a string, got 5$/],
  [C, completion({ stop: [''] }), 400, 'stop[0]', /^stop\[0\] must be a non-empty string, got ""$/],
  [C, completion({ stop: 7 }), 400, 'stop', /^stop must be a non-empty string or a list of them, got 7$/],
  [C, completion({ logprobs: 6 }), 400, 'logprobs', /^logprobs must be an integer in \[0, 5\], got 6$/],
  [C, completion({ top_logprobs: 2 }), 400, 'top_logprobs', /^Unrecognized request argument supplied: top_logprobs$/],
  [C, completion({ temprature: 1 }), 400, 'temprature', /^Unrecognized request argument supplied: temprature$/],
  [C, completion({ logit_bias: { 5: 1 } }), 400, 'logit_bias', /^logit_bias is not supported by this server$/],
  [C, completion({ echo: true }), 400, 'echo', /^echo is not supported/],
  [C, completion({ best_of: 3 }), 400, 'best_of', /^best_of is not supported/],
  [C, completion({ best_of: 'x' }), 400, 'best_of', /^best_of must be an integer in \[1, 20\] \(not supported above 1\), got "x"$/],
  [C, completion({ echo: 'yes' }), 400, 'echo', /^echo must be true or false \(true is not supported\), got "yes"$/],
  [H, chat({ tools: 1 }), 400, 'tools', /^tools must be a list of tools \(not supported when not empty\), got 1$/],
  [C, [1, 2], 400, 'body', /^body must be a JSON object, got \[1,2\]$/],
  [H, { model: 'stories' }, 400, 'messages', /^messages must be a non-empty list of messages, got nothing$/],
  [H, chat({ messages: [] }), 400, 'messages', /^messages must be a non-empty list of messages, got \[\]$/],
  [H, chat({ messages: [{ content: 'hi' }] }), 400, 'messages[0].role', /^messages\[0\]\.role must be one of system, developer, user, assistant, tool, got nothing$/],
  [H, chat({ messages: [{ role: 'user', content: 3 }] }), 400, 'messages[0].content', /^messages\[0\]\.content must be a string or a list of text parts, got 3$/],
  [H, chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }), 400, 'messages[0].content[0]', /^messages\[0\]\.content\[0\] must be a text part/],
  [H, chat({ top_logprobs: 21, logprobs: true }), 400, 'top_logprobs', /^top_logprobs must be an integer in \[0, 20\], got 21$/],
  [H, chat({ top_logprobs: 2 }), 400, 'top_logprobs', /^top_logprobs must be used with logprobs: true, got 2$/],
  [H, chat({ logprobs: 1 }), 400, 'logprobs', /^logprobs must be true or false, got 1$/],
  [H, chat({ temperature: 3 }), 400, 'temperature', /^temperature must be a number in \[0, 2\], got 3$/],
  [H, chat({ prompt: 'x' }), 400, 'prompt', /^Unrecognized request argument supplied: prompt$/],
  [H, chat({ tools: [{ type: 'function' }] }), 400, 'tools', /^tools is not supported/],
  [H, chat({ messages: [{ role: 'wizard', content: 'hi' }] }), 400, 'messages[0].role', /^messages\[0\]\.role must be one of system, developer, user, assistant, tool, got "wizard"$/],
];

test(`${CASES.length} bad OpenAI bodies: each its status and OpenAI's error shape naming the field`, async () => {
  for (const [path, body, status, param, message] of CASES) {
    const response = await post(path, body);
    const label = `${path} ${JSON.stringify(body)}`;
    assert.equal(response.statusCode, status, `${label}: ${response.body}`);
    const { error } = response.json() as { error: { message: string; type: string; param: string | null; code: string } };
    assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type'], label);
    assert.match(error.message, message, label);
    assert.equal(error.param, param, label);
    assert.equal(error.type, status === 404 || status < 500 ? 'invalid_request_error' : 'server_error', label);
  }
  assert.equal(fake.generated.length, 0, 'no bad body reached the client');
});

test('a valid body becomes one typed text request per sample: nulls dropped, vLLM fields kept, seeds seed+i', async () => {
  fake.generated.length = 0;
  const response = await post(C, completion({ prompt: ['a', 'b'], n: 2, seed: 7, temperature: 0.5, top_p: null, top_k: -1, repetition_penalty: 1.1, max_completion_tokens: 3, stop: 'x', user: 'u' }));
  assert.equal(response.statusCode, 200, response.body);
  assert.deepEqual(
    fake.generated.map((g) => g.request),
    [
      { text_input: 'a', temperature: 0.5, top_k: 0, seed: 7, stop: 'x', repetition_penalty: 1.1, max_tokens: 3, stream: false },
      { text_input: 'a', temperature: 0.5, top_k: 0, seed: 8, stop: 'x', repetition_penalty: 1.1, max_tokens: 3, stream: false },
      { text_input: 'b', temperature: 0.5, top_k: 0, seed: 7, stop: 'x', repetition_penalty: 1.1, max_tokens: 3, stream: false },
      { text_input: 'b', temperature: 0.5, top_k: 0, seed: 8, stop: 'x', repetition_penalty: 1.1, max_tokens: 3, stream: false },
    ],
  );
  const body = response.json() as { object: string; choices: Array<{ index: number; text: string; finish_reason: string }>; usage: Record<string, number> };
  assert.equal(body.object, 'text_completion');
  assert.deepEqual(body.choices.map((c) => [c.index, c.text, c.finish_reason]), [0, 1, 2, 3].map((i) => [i, 'w0 w1 w2', 'length']));
  assert.deepEqual(body.usage, { prompt_tokens: 6, completion_tokens: 12, total_tokens: 18 });
});

test('chat: text parts joined; streamed chunks start with the role, end with usage and [DONE]', async () => {
  fake.generated.length = 0;
  const response = await post(H, chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'he' }, { type: 'text', text: 'llo' }] }], stream: true, stream_options: { include_usage: true }, max_tokens: 2, logprobs: true, top_logprobs: 2 }));
  assert.equal(response.statusCode, 200);
  assert.match(String(response.headers['content-type']), /^text\/event-stream/);
  assert.deepEqual(fake.generated[0]!.request.messages, [{ role: 'user', content: 'hello' }]);
  assert.equal(fake.generated[0]!.request.top_logprobs, 2);
  const events = sseData(response.body);
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { object: string; choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null; logprobs: { content: Array<{ top_logprobs: unknown[] }> } | null }>; usage?: unknown });
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  assert.equal(chunks[0]!.choices[0]!.delta.role, 'assistant');
  assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), 'w0 w1');
  assert.equal(chunks[1]!.choices[0]!.logprobs!.content[0]!.top_logprobs.length, 2);
  assert.deepEqual(chunks.at(-1), { ...chunks.at(-1), choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
});

test('an error after the stream started is an OpenAI error event, then [DONE]', async () => {
  const failing = new FakeEngineClient({ pipelines: ['stories'], words: () => ['a', new ChorusError('CHORUS_OVERLOADED', 'the queue is full')] });
  const server = await buildServer({ client: failing, metrics: new Metrics() });
  const response = await server.inject({ method: 'POST', url: C, payload: completion({ stream: true }) });
  const events = sseData(response.body);
  assert.equal(JSON.parse(events[0]!).choices[0].text, 'a');
  assert.deepEqual(JSON.parse(events[1]!), { error: { message: 'the queue is full', type: 'rate_limit_error', param: null, code: 'CHORUS_OVERLOADED' } });
  assert.equal(events[2], '[DONE]');
  const refused = await server.inject({ method: 'POST', url: C, payload: completion() });
  assert.equal(refused.statusCode, 429);
  assert.equal(refused.headers['retry-after'], '1');
  await server.close();
});

test('/v1/models lists the pipelines; /v1/models/{m} answers one or 404s', async () => {
  assert.deepEqual((await app.inject('/v1/models')).json(), { object: 'list', data: ['gpt', 'stories'].map((id) => ({ id, object: 'model', created: 0, owned_by: 'chorus', random_weights: false })) });
  assert.deepEqual((await app.inject('/v1/models/gpt')).json(), { id: 'gpt', object: 'model', created: 0, owned_by: 'chorus', random_weights: false });
  const missing = await app.inject('/v1/models/nope');
  assert.equal(missing.statusCode, 404);
  assert.equal((missing.json() as { error: { param: string } }).error.param, 'model');
});

test('the fields Chorus cannot honour pass when a client sends their "unset" values', async () => {
  const response = await post(C, completion({ echo: false, logit_bias: {}, suffix: '', best_of: 1, tools: [], max_tokens: 1 }));
  assert.equal(response.statusCode, 200, response.body);
  const nulls = await post(H, chat({ echo: null, logit_bias: null, suffix: null, best_of: null, tools: null, max_tokens: 1 }));
  assert.equal(nulls.statusCode, 200, nulls.body);
});
