import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';
import { sseData, startServer, type TestServer } from '../helpers/server.ts';

let server: TestServer;
before(async () => {
  server = await startServer(join(ROOT, 'test/fixtures/repositories/ensembles'));
});
after(async () => {
  await server.close();
});

const post = (path: string, body: unknown) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('/generate_stream is SSE whose deltas join to /generate\'s text', async () => {
  const request = { id: 'r1', text_input: '', parameters: { max_tokens: 40, temperature: 0 } };
  const whole = (await (await post('/v2/models/stories/generate', request)).json()) as { id: string; model_name: string; text_output: string; finish_reason: string; usage: { prompt_tokens: number; completion_tokens: number } };
  assert.equal(whole.id, 'r1');
  assert.deepEqual(whole.usage, { prompt_tokens: 1, completion_tokens: 40 });
  assert.equal(whole.model_name, 'stories');
  assert.equal(whole.finish_reason, 'length');
  const response = await post('/v2/models/stories/generate_stream', request);
  assert.equal(response.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  const events = sseData(await response.text()).map((data) => JSON.parse(data) as { text_output: string; finish_reason?: string });
  assert.ok(events.length > 10);
  assert.equal(events.map((e) => e.text_output).join(''), whole.text_output);
  assert.equal(events.at(-1)!.finish_reason, 'length');
  assert.deepEqual((events.at(-1) as { usage?: unknown }).usage, whole.usage);
});

test('generate on an ensemble fills its inputs by name and answers its outputs by name', async () => {
  const out = (await (await post('/v2/models/stories/generate', { text_input: '', max_tokens: 8, temperature: 0 })).json()) as { text_output: string };
  const viaEnsemble = (await (await post('/v2/models/story-ensemble/generate', { text_input: '', max_tokens: 8, temperature: 0 })).json()) as { text_output: string };
  assert.equal(viaEnsemble.text_output, out.text_output);
  const tensors = (await (await post('/v2/models/diamond/generate', { text: 'Once upon a time', bonus: 1 })).json()) as { total: number };
  assert.equal(typeof tensors.total, 'number');
});

test('a stream refused before its first event answers its status; a client that leaves cancels its generation', async () => {
  const refused = await post('/v2/models/stories/generate_stream', { text_input: '', top_k: 5, beam_width: 2 });
  assert.equal(refused.status, 400);
  assert.match(((await refused.json()) as { error: string }).error, /^step generate: top_k 5 has no effect with beam_width 2/);
  const stats = () => server.client.stats().find((s) => s.name === 'stories')!;
  await server.client.load('stories');
  const cancelledBefore = stats().requestsCancelled;
  // A real socket: read a few events, then hang up.
  await new Promise<void>((resolve, reject) => {
    const url = new URL(`${server.url}/v2/models/stories/generate_stream`);
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let seen = 0;
      res.on('data', () => {
        if (++seen === 3) {
          req.destroy();
          resolve();
        }
      });
    });
    req.on('error', (error) => (error.message.includes('aborted') || error.message.includes('socket hang up') ? resolve() : reject(error)));
    req.end(JSON.stringify({ text_input: '', max_tokens: 250, temperature: 0.8 }));
  });
  const deadline = Date.now() + 5000;
  while (stats().requestsCancelled === cancelledBefore && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.equal(stats().requestsCancelled, cancelledBefore + 1);
  assert.equal(stats().running, 0);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /chorus_engine_running_requests\{model="stories"\} 0/);
  assert.match(metrics, /chorus_engine_queue_depth\{model="stories"\} 0/);
  assert.match(metrics, /chorus_engine_batch_occupancy\{model="stories"\} [1-9]/);
});
