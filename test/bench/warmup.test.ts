/**
 * chorus bench's warm-up: its requests go as many at once as the sweep's highest concurrency (one at a
 * time for request rates), against a stand-in server that counts the requests it holds at once.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { runBench } from '../../src/bench/index.ts';

let server: Server;
let url = '';
let open = 0;
/** The most requests held at once, and the requests answered, since the last reset. */
let most = 0;
let answered = 0;

before(async () => {
  server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      open++;
      most = Math.max(most, open);
      // Held a little, so that requests sent together overlap.
      setTimeout(() => {
        open--;
        answered++;
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ choices: [{ text: ' a' }], usage: { prompt_tokens: 3, completion_tokens: 1 } }));
      }, 20);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

const target = () => ({ url, pipeline: 'stand-in', protocol: 'openai' as const, stream: false, timeoutS: 30 });

test('warm-up requests go at the sweep\'s highest concurrency, and are not counted', async () => {
  most = 0;
  answered = 0;
  const results = await runBench({ target: target(), sampling: { max_tokens: 1 }, prompts: ['a', 'b'], settings: [{ concurrency: 2 }, { concurrency: 6 }], requests: 0, warmup: 12 });
  assert.equal(answered, 12);
  assert.equal(most, 6);
  assert.deepEqual(results.map((r) => r.requests.length), [0, 0]);
});

test('with request rates only, warm-up requests go one at a time; fewer warm-ups than the concurrency, each at once', async () => {
  most = 0;
  answered = 0;
  await runBench({ target: target(), sampling: { max_tokens: 1 }, prompts: ['a'], settings: [{ requestRate: 100 }], requests: 0, warmup: 4 });
  assert.deepEqual([answered, most], [4, 1]);
  most = 0;
  answered = 0;
  await runBench({ target: target(), sampling: { max_tokens: 1 }, prompts: ['a'], settings: [{ concurrency: 16 }], requests: 0, warmup: 3 });
  assert.deepEqual([answered, most], [3, 3]);
});
