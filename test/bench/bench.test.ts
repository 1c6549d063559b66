import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { percentile, summarize, timedRequest, type BenchResult, type RequestRecord } from '../../src/bench/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { startServer, type TestServer } from '../helpers/server.ts';
import { scratchDir } from '../helpers/scratch.ts';

const exec = promisify(execFile);
const work = scratchDir('chorus-bench-test-');
let server: TestServer;
/** Completion tokens of every generation the server ran, as its engine counted them. */
const served: number[] = [];

/** A repository with one pipeline, `stories`, over the real stories260K checkpoint. */
function storiesRepository(): string {
  const dir = join(work, 'repository');
  for (const kind of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, kind), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 16\n`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\ndefaults: { max_tokens: 60, temperature: 0 }\n');
  return dir;
}

before(async () => {
  server = await startServer(storiesRepository(), { onRequestDone: (_model, m) => served.push(m.tokens) });
});
after(async () => {
  await server.close();
});

const chorus = (...args: string[]) => exec(process.execPath, [join(ROOT, 'bin/chorus.js'), ...args], { cwd: work, env: { ...process.env, CHORUS_API_KEY: '' } });

test('a streamed concurrency sweep: every request recorded, token counts the server\'s, sums and rates consistent', async () => {
  const dataset = join(work, 'prompts.txt');
  writeFileSync(dataset, ['Once upon a time', 'Lily saw a big dog', 'The sun was hot', 'Tom had a red ball', 'One day, a cat'].join('\n'));
  served.length = 0;
  const out = join(work, 'sweep.json');
  const { stdout } = await chorus('bench', '--url', server.url, '--pipeline', 'stories', '--concurrency', '1,4', '--duration', '1.5', '--stream', '--warmup', '0', '--dataset', dataset, '--out', out, '--plot');
  const result = JSON.parse(readFileSync(out, 'utf8')) as BenchResult;
  assert.deepEqual(result.settings.map((s) => s.summary.label), ['concurrency 1', 'concurrency 4']);
  assert.match(stdout, /concurrency 1 .*\n.*concurrency 4/);
  const records = result.settings.flatMap((s) => s.requests);
  assert.ok(records.length >= 8, `${records.length} requests in 3 s`);
  // The server ran one more generation than recorded: the one-token request that sized the first prompt.
  assert.equal(served.length, records.length + 1);
  const calibration = served.indexOf(1);
  assert.ok(calibration >= 0);
  served.splice(calibration, 1);
  assert.deepEqual(records.map((r) => r.outputTokens!).sort((a, b) => a - b), [...served].sort((a, b) => a - b));
  for (const setting of result.settings) {
    const { summary, requests } = setting;
    assert.equal(summary.requests, requests.length);
    assert.equal(summary.ok, requests.filter((r) => r.ok).length);
    assert.deepEqual(summary.errors, {});
    assert.equal(summary.outputTokens, requests.reduce((s, r) => s + r.outputTokens!, 0));
    const span = (Math.max(...requests.map((r) => r.sentAt + r.latencyMs)) - Math.min(...requests.map((r) => r.sentAt))) / 1000;
    assert.ok(Math.abs(summary.durationS - span) < 1e-9);
    assert.ok(Math.abs(summary.outputTokensPerS - summary.outputTokens / span) < 1e-6);
    assert.ok(Math.abs(summary.requestsPerS - requests.length / span) < 1e-9);
    for (const r of requests) {
      assert.equal(r.status, 200);
      assert.ok(r.ttftMs! > 0 && r.ttftMs! <= r.latencyMs);
      // One streamed chunk with text per gap, after the first.
      assert.ok(r.itlMs.length >= 1 && r.itlMs.length <= r.outputTokens! - 1);
      assert.ok(Math.abs(r.ttftMs! + r.itlMs.reduce((a, b) => a + b, 0) - r.latencyMs) < r.latencyMs);
    }
    const ttfts = requests.map((r) => r.ttftMs!).sort((a, b) => a - b);
    assert.equal(summary.ttftMs!.p50, percentile(ttfts, 50));
  }
  // Concurrency 4 keeps up to four requests in flight at once.
  const c4 = result.settings[1]!.requests;
  const overlapping = c4.filter((r) => c4.some((o) => o !== r && o.sentAt < r.sentAt + r.latencyMs && r.sentAt < o.sentAt + o.latencyMs));
  assert.ok(overlapping.length > 0);
  assert.ok(existsSync(join(work, 'sweep.svg')));
  assert.ok(readFileSync(join(work, 'sweep.svg'), 'utf8').includes('output tokens/s'));
  assert.deepEqual([...readFileSync(join(work, 'sweep.png')).subarray(1, 4)], [...Buffer.from('PNG')]);
});

test('each protocol reports the output tokens asked for', async () => {
  for (const protocol of ['openai', 'generate', 'kserve']) {
    const out = join(work, `${protocol}.json`);
    await chorus('bench', '--url', server.url, '--pipeline', 'stories', '--protocol', protocol, '--concurrency', '2', '--requests', '4', '--prompt-tokens', '12', '--output-tokens', '7', '--out', out);
    const result = JSON.parse(readFileSync(out, 'utf8')) as BenchResult;
    const [setting] = result.settings;
    assert.equal(setting!.summary.ok, 4, protocol);
    assert.deepEqual(setting!.requests.map((r) => r.outputTokens), [7, 7, 7, 7], protocol);
    assert.equal(setting!.summary.outputTokens, 28);
    // Synthetic prompts sized by the server's count, to the nearest whole word.
    assert.ok(Math.abs(result.prompts.measuredTokens! - 12) <= 2, `${protocol}: ${result.prompts.measuredTokens} prompt tokens`);
    assert.equal(setting!.requests.find((r) => r.prompt === 0)!.promptTokens, result.prompts.measuredTokens);
  }
});

test('--temperature, --top-p and --request-seed reach every protocol: the same seeds give the same answers', async () => {
  for (const protocol of ['openai', 'generate', 'kserve']) {
    const run = async (seed: string): Promise<BenchResult> => {
      const out = join(work, `sampled-${protocol}-${seed}.json`);
      await chorus('bench', '--url', server.url, '--pipeline', 'stories', '--protocol', protocol, '--concurrency', '2', '--requests', '6', '--prompt-tokens', '8', '--output-tokens', '24', '--temperature', '1.5', '--top-p', '0.95', '--request-seed', seed, '--warmup', '0', '--out', out);
      return JSON.parse(readFileSync(out, 'utf8')) as BenchResult;
    };
    const [first, again, other] = [await run('5'), await run('5'), await run('900')];
    assert.deepEqual(first.sampling, { max_tokens: 24, min_tokens: 24, temperature: 1.5, top_p: 0.95 }, protocol);
    assert.equal(first.requestSeed, 5);
    const chars = (r: BenchResult) => r.settings[0]!.requests.map((q) => q.outputChars);
    assert.equal(first.settings[0]!.summary.ok, 6, protocol);
    assert.deepEqual(chars(again), chars(first), `${protocol}: seeded requests repeat`);
    assert.notDeepEqual(chars(other), chars(first), `${protocol}: other seeds, other texts`);
  }
  await assert.rejects(chorus('bench', '--url', server.url, '--pipeline', 'stories', '--top-p', '1.5'), /--top-p must be a number in \(0, 1\], got "1.5"/);
});

test('request rates: Poisson arrivals at the rate asked, inf all at once', async () => {
  const out = join(work, 'rate.json');
  await chorus('bench', '--url', server.url, '--pipeline', 'stories', '--request-rate', '40,inf', '--requests', '12', '--output-tokens', '2', '--warmup', '0', '--out', out);
  const result = JSON.parse(readFileSync(out, 'utf8')) as BenchResult;
  const [paced, burst] = result.settings;
  const last = Math.max(...paced!.requests.map((r) => r.sentAt));
  assert.ok(last > 100 && last < 2000, `12 requests at 40/s sent over ${last} ms`);
  assert.ok(Math.max(...burst!.requests.map((r) => r.sentAt)) < 50);
});

test('failures are counted by status, and a server that fails the first request stops the run with its error', async () => {
  const records: RequestRecord[] = [
    { index: 0, prompt: 0, sentAt: 0, status: 200, ok: true, latencyMs: 10, itlMs: [], chunks: 1, outputChars: 3, outputTokens: 4 },
    { index: 1, prompt: 0, sentAt: 1, status: 503, ok: false, error: 'overloaded', latencyMs: 1, itlMs: [], chunks: 0, outputChars: 0 },
    { index: 2, prompt: 0, sentAt: 2, status: 0, ok: false, error: 'reset', latencyMs: 1, itlMs: [], chunks: 0, outputChars: 0 },
    { index: 3, prompt: 0, sentAt: 3, status: 200, ok: false, error: 'stream: boom', latencyMs: 5, itlMs: [], chunks: 2, outputChars: 0 },
  ];
  const summary = summarize('concurrency 1', { concurrency: 1 }, records, false);
  assert.deepEqual(summary.errors, { 503: 1, 0: 1, stream: 1 });
  assert.equal(summary.ok, 1);
  assert.equal(summary.outputTokens, 4);
  assert.equal(summary.durationS, 0.01);
  await assert.rejects(chorus('bench', '--url', server.url, '--pipeline', 'nope', '--out', join(work, 'x.json')), (error: { stderr: string }) => {
    assert.match(error.stderr, /the first request to nope \(openai\) failed: 404: .*does not exist/);
    return true;
  });
  await assert.rejects(chorus('bench', '--pipeline', 'stories', '--concurrency', '2', '--request-rate', '3'), (error: { stderr: string }) => {
    assert.match(error.stderr, /--request-rate must be used without --concurrency/);
    return true;
  });
});

test('bench plot draws several results files as one chart', async () => {
  const { stderr } = await chorus('bench', 'plot', join(work, 'openai.json'), join(work, 'kserve.json'), '--label', 'openai,kserve', '--out', join(work, 'both'));
  assert.match(stderr, /wrote .*both\.svg and .*both\.png/);
  const svg = readFileSync(join(work, 'both.svg'), 'utf8');
  assert.ok(svg.includes('>openai<') && svg.includes('>kserve<'));
  await assert.rejects(chorus('bench', 'plot', join(work, 'prompts.txt')), /not a results file of chorus bench/);
});

test('a request with no answer within its limit, and a refused connection, are records with their cause', async () => {
  // A server that takes the connection and never answers.
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (silent.address() as AddressInfo).port;
  const target = { pipeline: 'stories', protocol: 'openai' as const, stream: true, timeoutS: 0.5 };
  const quiet = await timedRequest({ ...target, url: `http://127.0.0.1:${port}` }, 'Once', { max_tokens: 4 }, 0, 0, performance.now());
  assert.equal(quiet.ok, false);
  assert.equal(quiet.status, 0);
  assert.equal(quiet.error, 'no answer within 0.5 s');
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => silent.close(() => resolve()));
  // The port is free now: the connection is refused.
  const refused = await timedRequest({ ...target, url: `http://127.0.0.1:${port}` }, 'Once', { max_tokens: 4 }, 1, 0, performance.now());
  assert.equal(refused.ok, false);
  assert.match(refused.error ?? '', /ECONNREFUSED/);
  // And a served request streams as before.
  const ok = await timedRequest({ ...target, url: server.url, timeoutS: 30 }, 'Once', { max_tokens: 8, min_tokens: 8 }, 2, 0, performance.now());
  assert.equal(ok.ok, true, ok.error);
  assert.equal(ok.outputTokens, 8);
  assert.ok(ok.ttftMs !== undefined && ok.itlMs.length > 0);
});
