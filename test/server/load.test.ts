/**
 * Load through the whole server on stories260K: clients that leave leave nothing running, and a burst
 * beyond the queue is answered in full, each request served or refused with Retry-After.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, test } from 'node:test';
import { STORIES } from '../helpers/paths.ts';
import { startServer, storiesRepository, type TestServer } from '../helpers/server.ts';

let server: TestServer;
before(async () => {
  server = await startServer(storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 8\nmax_queue: 64\n` }));
  await server.client.load('stories');
});
after(async () => {
  await server.close();
});

const stats = () => server.client.stats().find((s) => s.name === 'stories')!;
const settle = async (): Promise<void> => {
  while (stats().running + stats().waiting > 0) await new Promise((r) => setTimeout(r, 20));
};

/** A streamed request whose client hangs up: at once (`events` 0) or after that many events. */
function leave(events: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const url = new URL(`${server.url}/v2/models/stories/generate_stream`);
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let seen = 0;
      res.on('data', () => {
        if (++seen >= events) {
          req.destroy();
          resolve();
        }
      });
      res.on('end', resolve);
    });
    req.on('error', (error) => (/aborted|socket hang up|ECONNRESET/.test(error.message) ? resolve() : reject(error)));
    req.end(JSON.stringify({ text_input: 'Once upon a time', max_tokens: 400, temperature: 0.8 }), () => {
      if (events === 0) setTimeout(() => req.destroy(), 5);
    });
  });
}

test('200 streams whose clients leave (queued or mid-answer) leave nothing running, and the server goes on', async () => {
  const ended: Array<{ tokens: number; finishReason: string }> = [];
  const watch = server.client.requestsDone.subscribe(({ metrics }) => ended.push(metrics));
  // In waves below the queue's size, so that no request is refused for being one too many.
  for (let wave = 0; wave < 4; wave++) await Promise.all(Array.from({ length: 50 }, (_, i) => leave(i % 2 === 0 ? 0 : 2)));
  await settle();
  watch.unsubscribe();
  assert.equal(stats().running, 0);
  assert.equal(stats().waiting, 0);
  // Every request that reached the engine was cancelled there, none ran on to its 400 tokens.
  assert.ok(ended.length >= 100, `${ended.length} of 200 reached the engine`);
  assert.deepEqual(ended.filter((m) => m.finishReason !== 'cancelled' || m.tokens >= 400), []);
  const ok = await fetch(`${server.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: '', max_tokens: 5, temperature: 0 }) });
  assert.equal(ok.status, 200);
});

test('a burst of 400 requests: each served with its text, or refused with 429 (OpenAI) / 503 (generate) and Retry-After', async () => {
  const send = (i: number) =>
    i % 2 === 0
      ? fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'stories', prompt: 'Once', max_tokens: 6, seed: i }) })
      : fetch(`${server.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: 'Once', max_tokens: 6, seed: i }) });
  const responses = await Promise.all(Array.from({ length: 400 }, (_, i) => send(i)));
  const outcomes = await Promise.all(
    responses.map(async (response, i) => {
      const body = (await response.json()) as { choices?: Array<{ text: string }>; text_output?: string; error?: unknown };
      if (response.status === 200) {
        assert.equal(typeof (i % 2 === 0 ? body.choices?.[0]?.text : body.text_output), 'string');
        return 'served';
      }
      assert.equal(response.status, i % 2 === 0 ? 429 : 503, JSON.stringify(body));
      assert.equal(response.headers.get('retry-after'), '1');
      assert.notEqual(body.error, undefined);
      return 'refused';
    }),
  );
  assert.equal(outcomes.length, 400);
  assert.ok(outcomes.includes('served'));
  await settle();
});
