/** A full queue is answered at once: 429 on OpenAI routes, 503 elsewhere, with Retry-After. */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { STORIES } from '../helpers/paths.ts';
import { startServer } from '../helpers/server.ts';
import { scratchDir } from '../helpers/scratch.ts';

test('beyond max_queue waiting requests, a request is refused with 429 (OpenAI) or 503 (generate) and Retry-After', async () => {
  const dir = scratchDir('chorus-overload-');
  for (const folder of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, folder));
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 1\nmax_queue: 1\n`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\n');
  const server = await startServer(dir);
  await server.client.load('stories');
  const stats = () => server.client.stats().find((s) => s.name === 'stories')!;
  const controller = new AbortController();
  const long = (path: string, body: unknown) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: controller.signal }).catch(() => undefined);
  // One running, one waiting: the queue is full.
  void long('/v2/models/stories/generate', { text_input: '', max_tokens: 400, temperature: 0.8 });
  while (stats().running < 1) await new Promise((r) => setTimeout(r, 5));
  void long('/v2/models/stories/generate', { text_input: '', max_tokens: 400, temperature: 0.8 });
  while (stats().waiting < 1) await new Promise((r) => setTimeout(r, 5));
  const openai = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'stories', prompt: '', max_tokens: 5 }) });
  assert.equal(openai.status, 429);
  assert.equal(openai.headers.get('retry-after'), '1');
  const body = (await openai.json()) as { error: { type: string; message: string } };
  assert.equal(body.error.type, 'rate_limit_error');
  assert.match(body.error.message, /the queue holds 1 waiting requests already; retry later/);
  const kserve = await fetch(`${server.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: '', max_tokens: 5 }) });
  assert.equal(kserve.status, 503);
  assert.equal(kserve.headers.get('retry-after'), '1');
  controller.abort();
  while (stats().running + stats().waiting > 0) await new Promise((r) => setTimeout(r, 5));
  await server.close();
});

test('CORS is off unless an origin is given; the API key guards all but health and metrics', async () => {
  const { join: joinPath } = await import('node:path');
  const { ROOT } = await import('../helpers/paths.ts');
  const repository = joinPath(ROOT, 'test/fixtures/repositories/ensembles');
  const closed = await startServer(repository);
  assert.equal((await fetch(`${closed.url}/v1/models`)).headers.get('access-control-allow-origin'), null);
  await closed.close();
  const open = await startServer(repository, { corsOrigin: 'https://app.example', apiKey: 'k' });
  const preflight = await fetch(`${open.url}/v1/chat/completions`, { method: 'OPTIONS' });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.equal((await fetch(`${open.url}/v2/health/ready`)).status, 200);
  assert.equal((await fetch(`${open.url}/metrics`)).status, 200);
  const denied = await fetch(`${open.url}/v2/models/stories`);
  assert.equal(denied.status, 401);
  assert.deepEqual(await denied.json(), { error: 'missing or wrong API key: send Authorization: Bearer <key>' });
  assert.equal((await fetch(`${open.url}/v2/models/stories`, { headers: { authorization: 'Bearer k' } })).status, 200);
  await open.close();
});
