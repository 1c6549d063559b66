import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { ROOT } from '../helpers/paths.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
let server: TestServer;
let openai: OpenAI;

before(async () => {
  server = await startServer(join(ROOT, 'test/fixtures/repositories/ensembles'), { apiKey: 'sk-test' });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
});
after(async () => {
  await server.close();
});

test('the official openai client completes, streamed and not; the deltas join to the whole text', async () => {
  const whole = await openai.completions.create({ model: 'stories', prompt: '', max_tokens: 40, temperature: 0 });
  assert.ok(whole.choices[0]!.text.startsWith(STORY), whole.choices[0]!.text);
  assert.equal(whole.choices[0]!.finish_reason, 'length');
  assert.deepEqual(whole.usage, { prompt_tokens: 1, completion_tokens: 40, total_tokens: 41 });
  const stream = await openai.completions.create({ model: 'stories', prompt: '', max_tokens: 40, temperature: 0, stream: true });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    chunks++;
  }
  assert.equal(text, whole.choices[0]!.text);
  assert.ok(chunks > 10);
});

test('chat completions, streamed and not, with usage on the last chunk when asked', async () => {
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }];
  const whole = await openai.chat.completions.create({ model: 'stories', messages, max_tokens: 30, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0]!.message.role, 'assistant');
  assert.ok((whole.choices[0]!.message.content ?? '').length > 20);
  const stream = await openai.chat.completions.create({ model: 'stories', messages, max_tokens: 30, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let content = '';
  let usage;
  let finish;
  for await (const chunk of stream) {
    content += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(content, whole.choices[0]!.message.content);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('n, seed and stop: n samples, repeatable with a seed; a stop string ends the text before it', async () => {
  const ask = () => openai.completions.create({ model: 'stories', prompt: '', max_tokens: 20, temperature: 1, n: 2, seed: 5 });
  const first = await ask();
  assert.equal(first.choices.length, 2);
  assert.notEqual(first.choices[0]!.text, first.choices[1]!.text);
  assert.deepEqual((await ask()).choices.map((c) => c.text), first.choices.map((c) => c.text));
  const stopped = await openai.completions.create({ model: 'stories', prompt: '', max_tokens: 40, temperature: 0, stop: ['Lily'] });
  assert.equal(stopped.choices[0]!.text, 'Once upon a time, there was a little girl named ');
  assert.equal(stopped.choices[0]!.finish_reason, 'stop');
});

test('errors come in OpenAI\'s shape through the client: bad key, unknown model, bad field', async () => {
  const wrongKey = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (error) => error instanceof OpenAI.AuthenticationError && error.status === 401);
  await assert.rejects(openai.completions.create({ model: 'nope', prompt: 'x' }), (error) => error instanceof OpenAI.NotFoundError && /The model `nope` does not exist/.test(error.message));
  await assert.rejects(openai.completions.create({ model: 'stories', prompt: 'x', temperature: -1 }), (error) => error instanceof OpenAI.BadRequestError && /temperature must be a number in \[0, 2\], got -1/.test(error.message));
  const models = await openai.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['stories', 'story-ensemble']);
});

test("logprobs: each token's log-probability and its step's most likely alternatives, streamed and not", async () => {
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }];
  const whole = await openai.chat.completions.create({ model: 'stories', messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = whole.choices[0]!.logprobs!.content!;
  assert.equal(content.length, 12);
  for (const entry of content) {
    assert.ok(entry.logprob <= 0);
    assert.equal(entry.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one, with the same log-probability.
    assert.equal(entry.top_logprobs[0]!.token, entry.token);
    assert.equal(entry.top_logprobs[0]!.logprob, entry.logprob);
    assert.ok(entry.top_logprobs[1]!.logprob <= entry.top_logprobs[0]!.logprob);
    assert.deepEqual(entry.bytes, [...Buffer.from(entry.token)]);
  }
  const stream = await openai.chat.completions.create({ model: 'stories', messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
  const completion = await openai.completions.create({ model: 'stories', prompt: '', max_tokens: 6, temperature: 0, logprobs: 2 });
  const lp = completion.choices[0]!.logprobs!;
  assert.equal(lp.tokens!.length, 6);
  assert.equal(lp.token_logprobs!.length, 6);
  assert.ok(lp.top_logprobs!.every((top) => Object.keys(top).length <= 2));
  assert.equal(lp.tokens!.join(''), completion.choices[0]!.text);
  assert.deepEqual(lp.text_offset, lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join('').length));
});
