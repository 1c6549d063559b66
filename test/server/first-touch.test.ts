/**
 * What a first user meets: curl's form-typed bodies read as JSON on the generate and infer routes, and
 * a pipeline's default max_tokens that shrinks to the context the prompt leaves (an explicit one that
 * cannot fit is a 400 naming both numbers).
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { STORIES } from '../helpers/paths.ts';
import { startServer, storiesRepository, type TestServer } from '../helpers/server.ts';

let server: TestServer;
before(async () => {
  const repository = storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n` });
  // stories260K holds 512 tokens; this pipeline's default asks for more.
  writeFileSync(join(repository, 'pipelines/long.yaml'), 'model: stories\ndefaults: { max_tokens: 600, temperature: 0 }\n');
  server = await startServer(repository);
});
after(async () => server?.close());

const send = (path: string, body: string, type?: string): Promise<Response> =>
  fetch(`${server.url}${path}`, { method: 'POST', headers: type === undefined ? {} : { 'content-type': type }, body });

test('generate and infer read the body as JSON whatever its content type', async () => {
  for (const type of ['application/x-www-form-urlencoded', 'text/plain', 'application/octet-stream', undefined]) {
    const generated = await send('/v2/models/stories/generate', JSON.stringify({ text_input: '', max_tokens: 5, temperature: 0 }), type);
    assert.equal(generated.status, 200, `${type}: ${await generated.clone().text()}`);
    assert.equal(((await generated.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens, 5);
    const inferred = await send('/v2/models/diamond/infer', JSON.stringify({ inputs: [{ name: 'text', datatype: 'BYTES', shape: [1, 1], data: ['Once'] }] }), type);
    assert.equal(inferred.status, 200, `${type}: ${await inferred.clone().text()}`);
  }
  const streamed = await send('/v2/models/stories/generate_stream', JSON.stringify({ text_input: '', max_tokens: 3 }), 'application/x-www-form-urlencoded');
  assert.equal(streamed.status, 200);
  assert.doesNotMatch(await streamed.text(), /"error"/);
  const broken = await send('/v2/models/stories/generate', 'text_input=hello', 'application/x-www-form-urlencoded');
  assert.equal(broken.status, 400);
  assert.match(((await broken.json()) as { error: string }).error, /^body must be valid JSON/);
});

test('without max_tokens the default shrinks to what the context leaves; an explicit one that cannot fit is a 400', async () => {
  const fitted = await send('/v2/models/long/generate', JSON.stringify({ text_input: 'Once upon a time', min_tokens: 500 }), 'application/json');
  const answer = (await fitted.json()) as { finish_reason: string; usage: { prompt_tokens: number; completion_tokens: number } };
  assert.equal(fitted.status, 200, JSON.stringify(answer));
  assert.equal(answer.finish_reason, 'length');
  assert.equal(answer.usage.prompt_tokens + answer.usage.completion_tokens, 512);
  const refused = await send('/v2/models/long/generate', JSON.stringify({ text_input: 'Once upon a time', max_tokens: 600 }), 'application/json');
  assert.equal(refused.status, 400);
  const { error } = (await refused.json()) as { error: string };
  assert.match(error, new RegExp(`^step generate: max_tokens 600 is more than the ${512 - answer.usage.prompt_tokens} tokens model stories has room for after a prompt of ${answer.usage.prompt_tokens}$`));
  // Streamed, the same request is refused before any event: the status is the 400, not a 200.
  const streamed = await send('/v2/models/long/generate_stream', JSON.stringify({ text_input: 'Once upon a time', max_tokens: 600 }), 'application/json');
  assert.equal(streamed.status, 400);
  assert.match(((await streamed.json()) as { error: string }).error, /^step generate: max_tokens 600 is more than the \d+ tokens/);
  const chat = await send('/v1/completions', JSON.stringify({ model: 'long', stream: true, max_tokens: 600, prompt: 'Once upon a time' }), 'application/json');
  assert.equal(chat.status, 400);
  const openAiError = ((await chat.json()) as { error: { message: string; param: string | null } }).error;
  assert.match(openAiError.message, /^step generate: max_tokens 600 is more than the \d+ tokens/);
  assert.equal(openAiError.param, 'max_tokens');
  // One that fits streams as before.
  const fits = await send('/v2/models/long/generate_stream', JSON.stringify({ text_input: 'Once upon a time', max_tokens: 3 }), 'application/json');
  assert.equal(fits.status, 200);
  assert.match(await fits.text(), /^data: /);
});
