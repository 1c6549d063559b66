/**
 * `chorus serve --http-threads`: HTTP on threads of its own sharing one port, over the main thread's
 * engine client. Real sockets, a fake client on the main thread: answers as one thread gives them,
 * /metrics summed over the threads from whichever answers it, a client that leaves cancels on the main
 * thread, and close waits for the requests in flight.
 */
import assert from 'node:assert/strict';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { httpThreadCount, httpThreadsRefused, startHttpThreads } from '../../src/cli/http-threads.ts';
import { Metrics } from '../../src/server/index.ts';
import { FakeEngineClient } from '../helpers/fake-client.ts';

async function post(url: string, body: unknown): Promise<{ status: number; text: string }> {
  // A connection a request, so that the kernel spreads them over the threads.
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' }, body: JSON.stringify(body) });
  return { status: response.status, text: await response.text() };
}

test('requests over several HTTP threads answer as on one, and /metrics sums every thread', async () => {
  const fake = new FakeEngineClient({ pipelines: ['chat'], models: ['llm'] });
  const metrics = new Metrics();
  const threads = await startHttpThreads({ count: 3, client: fake, metrics, host: '127.0.0.1', port: 0, server: { logger: false }, log: () => {} });
  try {
    const url = threads.address;
    const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => post(`${url}/v1/completions`, { model: 'chat', prompt: `p${i}`, max_tokens: 3, stream: i % 2 === 0 })));
    for (const [i, { status, text }] of answers.entries()) {
      assert.equal(status, 200, text);
      if (i % 2 === 0) {
        const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
        assert.equal(events.at(-1), 'data: [DONE]');
        const deltas = events.slice(0, -1).map((e) => (JSON.parse(e.slice(6)) as { choices: Array<{ text: string }> }).choices[0]!.text);
        assert.equal(deltas.join(''), 'w0 w1 w2');
      } else assert.equal((JSON.parse(text) as { choices: Array<{ text: string }> }).choices[0]!.text, 'w0 w1 w2');
    }
    assert.equal(fake.generated.length, 24);
    // A name the main thread does not have is refused by the thread, in OpenAI's shape.
    const unknown = await post(`${url}/v1/completions`, { model: 'nope', prompt: 'x' });
    assert.equal(unknown.status, 404);
    assert.equal((JSON.parse(unknown.text) as { error: { param: string } }).error.param, 'model');
    // Model control from a thread runs on the main thread.
    const load = await post(`${url}/v2/repository/models/llm/load`, {});
    assert.equal(load.status, 200, load.text);
    assert.deepEqual(fake.control, ['load llm']);
    // Each scrape, from whichever thread takes it, counts every thread's requests.
    for (let i = 0; i < 4; i++) {
      const scrape = await fetch(`${url}/metrics`, { headers: { connection: 'close' } }).then((r) => r.text());
      assert.match(scrape, /^nv_inference_request_success\{model="chat"\} 24$/m);
      assert.match(scrape, /^nv_inference_request_success\{model="llm"\} 1$/m);
      assert.doesNotMatch(scrape, /model="nope"/);
      // The process metrics once, from the main thread.
      assert.equal(scrape.match(/^process_resident_memory_bytes /gm)?.length, 1);
    }
  } finally {
    await threads.close();
  }
});

test('a client that leaves cancels on the main thread; close waits for the requests in flight', async () => {
  const fake = new FakeEngineClient({ pipelines: ['chat'] });
  const threads = await startHttpThreads({ count: 2, client: fake, metrics: new Metrics(), host: '127.0.0.1', port: 0, server: { logger: false }, log: () => {} });
  let closed = false;
  try {
    // A long stream, read until a few events came, then dropped.
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${threads.address}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        let events = 0;
        res.on('data', (chunk: Buffer) => {
          events += chunk.toString().split('data: ').length - 1;
          if (events >= 3) {
            req.destroy();
            resolve();
          }
        });
      });
      req.on('error', (error) => (req.destroyed ? undefined : reject(error)));
      req.end(JSON.stringify({ model: 'chat', prompt: 'x', max_tokens: 100000, stream: true }));
    });
    for (let i = 0; i < 200 && fake.cancelled === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(fake.cancelled, 1);
    assert.equal(fake.active, 0);
    // A request in flight when close is asked still gets its whole answer.
    const inFlight = post(`${threads.address}/v1/completions`, { model: 'chat', prompt: 'x', max_tokens: 400, stream: true });
    for (let i = 0; i < 200 && fake.active === 0; i++) await new Promise((resolve) => setTimeout(resolve, 2));
    const closing = threads.close().then(() => (closed = true));
    const answer = await inFlight;
    assert.equal(answer.status, 200);
    assert.match(answer.text, /w399","finish_reason":null/);
    assert.match(answer.text, /data: \[DONE\]\n\n$/);
    await closing;
    await assert.rejects(fetch(`${threads.address}/v1/models`));
  } finally {
    if (!closed) await threads.close();
  }
});

test('--http-threads: auto is 2 from 8 cores and 1 below or without reusePort; counts outside 1 to 64 are none', () => {
  assert.equal(httpThreadCount('auto', 16, true), 2);
  assert.equal(httpThreadCount('auto', 8, true), 2);
  assert.equal(httpThreadCount('auto', 2, true), 1);
  assert.equal(httpThreadCount('auto', 16, false), 1);
  assert.match(httpThreadsRefused(2, false)!, /--http-threads 2 needs listen's reusePort \(Node 22\.12 or later, on Linux or FreeBSD\)/);
  assert.equal(httpThreadsRefused(1, false), undefined);
  assert.equal(httpThreadsRefused(4, true), undefined);
  assert.equal(httpThreadCount('3'), 3);
  for (const bad of ['0', '65', '1.5', 'two', '']) assert.equal(httpThreadCount(bad), undefined, bad);
});

test('a port another server listens on is refused (the threads\' shared port would join it)', async () => {
  const other = createServer();
  await new Promise<void>((resolve) => other.listen({ host: '127.0.0.1', port: 0 }, () => resolve()));
  const port = (other.address() as AddressInfo).port;
  try {
    await assert.rejects(startHttpThreads({ count: 2, client: new FakeEngineClient({ pipelines: ['chat'] }), metrics: new Metrics(), host: '127.0.0.1', port, server: { logger: false }, log: () => {} }), { code: 'EADDRINUSE' });
  } finally {
    await new Promise((resolve) => other.close(resolve));
  }
});
