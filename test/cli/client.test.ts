/**
 * `chorus infer --request` and `chorus client` against a served repository, run as a user runs them
 * (bin/chorus.js in a child process, talking HTTP to the server in this one).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OrderedPrinter } from '../../src/cli/client.ts';
import { formatArray } from '../../src/cli/request-file.ts';
import { bundledRepositoryDir } from '../../src/repository/index.ts';
import { tinyFtRepository } from '../helpers/ft-repository.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { storiesRepository, startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';
const SAMPLE = join(ROOT, 'test/fixtures/requests/t5-translate.json');

/** Runs `chorus` in a child process without blocking this one (which serves it). */
function chorus(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), ...args], { cwd: ROOT, env: { ...process.env, HF_HUB_OFFLINE: '1' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** The `name:` blocks of issue_request.py-style output. */
function blocks(stdout: string): Record<string, string> {
  return Object.fromEntries(
    stdout
      .trim()
      .split(/\n\n(?=[a-z_]+:\n)/)
      .map((block) => [block.slice(0, block.indexOf(':')), block.slice(block.indexOf('\n') + 1)]),
  );
}

describe('chorus infer --request', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(bundledRepositoryDir());
  });
  after(async () => {
    await server.close();
  });

  test('sends FT\'s T5 sample request and prints output_ids and sequence_length as FT\'s client reads them', async () => {
    const result = await chorus('infer', '--request', SAMPLE, '--url', server.url, '--model', 't5-fastertransformer');
    assert.equal(result.status, 0, result.stderr);
    const printed = blocks(result.stdout);
    assert.deepEqual(Object.keys(printed), ['output_ids', 'sequence_length', 'cum_log_probs', 'output_log_probs']);
    const direct = (await (
      await fetch(`${server.url}/v2/models/t5-fastertransformer/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          inputs: [
            { name: 'input_ids', datatype: 'UINT32', shape: [1, 11], data: [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1] },
            { name: 'sequence_length', datatype: 'UINT32', shape: [1, 1], data: [11] },
            { name: 'max_output_len', datatype: 'UINT32', shape: [1, 1], data: [8] },
            { name: 'runtime_top_k', datatype: 'UINT32', shape: [1, 1], data: [1] },
            { name: 'end_id', datatype: 'UINT32', shape: [1, 1], data: [1] },
          ],
        }),
      })
    ).json()) as { outputs: Array<{ name: string; datatype: 'INT32'; shape: number[]; data: number[] }> };
    for (const output of direct.outputs) assert.equal(printed[output.name], formatArray(output), output.name);
    assert.match(printed.sequence_length!, /^\[\[\d+\]\]$/);
    assert.match(printed.output_ids!, /^\[\[\[[\d ]+\]\]\]$/);
  });

  test('runs a request file in process without --url; a KServe request body works the same', async () => {
    const repository = tinyFtRepository();
    const kserve = join(scratchDir('chorus-request-'), 'request.json');
    writeFileSync(kserve, JSON.stringify({ inputs: [
      { name: 'input_ids', shape: [1, 3], datatype: 'UINT32', data: [5, 6, 7] },
      { name: 'input_lengths', shape: [1, 1], datatype: 'UINT32', data: [3] },
      { name: 'request_output_len', shape: [1, 1], datatype: 'UINT32', data: [4] },
      { name: 'beam_width', shape: [1, 1], datatype: 'UINT32', data: [2] },
    ], outputs: [{ name: 'output_ids' }, { name: 'sequence_length' }] }));
    const result = await chorus('infer', '--request', kserve, '--repository', repository);
    assert.equal(result.status, 0, result.stderr);
    const printed = blocks(result.stdout);
    assert.deepEqual(Object.keys(printed), ['output_ids', 'sequence_length']);
    assert.match(printed.output_ids!, /^\[\[\[ *5 +6 +7( +\d+){4}\]\n {2}\[ *5 +6 +7( +\d+){4}\]\]\]$/, 'two beams of prompt + 4 tokens, as numpy prints them');
    assert.equal(printed.sequence_length, '[[7 7]]');
    const bad = await chorus('infer', '--request', SAMPLE, '--repository', repository, '--model', 'nope');
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /no ensemble named nope/);
  });
});

describe('chorus client', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer(storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n` }), { apiKey: 'k' });
  });
  after(async () => {
    await server.close();
  });

  const ask = async (prompt: string): Promise<string> =>
    ((await (await fetch(`${server.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: JSON.stringify({ text_input: prompt, max_tokens: 12, temperature: 0 }) })).json()) as { text_output: string }).text_output;

  test('streams two prompts from a served pipeline, in order, each as the server answers it', async () => {
    const prompts = ['Once upon a time', 'Lily and Ben'];
    const expected = prompts.map(async (p) => `> ${p}\n${await ask(p)}\n`);
    for (const flags of [['--stream'], ['--stream', '--concurrency', '2'], []]) {
      const result = await chorus('client', '--url', server.url, '--api-key', 'k', '--pipeline', 'stories', '--prompts', ...prompts, '--max-tokens', '12', '--field', 'temperature=0', ...flags);
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, (await Promise.all(expected)).join(''), flags.join(' '));
    }
  });

  test('a wrong key or pipeline is a clear error', async () => {
    const denied = await chorus('client', '--url', server.url, '--pipeline', 'stories', '--prompts', 'x');
    assert.equal(denied.status, 1);
    assert.match(denied.stderr, /answered 401: missing or wrong API key/);
    const unknown = await chorus('client', '--url', server.url, '--api-key', 'k', '--pipeline', 'nope', '--prompts', 'x');
    assert.match(unknown.stderr, /answered 404/);
  });
});

test('OrderedPrinter lets the first unfinished answer through and holds the rest until their turn', () => {
  let out = '';
  const printer = new OrderedPrinter(3, (text) => (out += text));
  printer.write(1, 'b1');
  printer.write(0, 'a1');
  printer.write(2, 'c1');
  assert.equal(out, 'a1');
  printer.end(2, '|');
  printer.write(1, 'b2');
  printer.end(0, '|');
  assert.equal(out, 'a1|b1b2');
  printer.end(1, '|');
  assert.equal(out, 'a1|b1b2|c1|');
});

test('a request file\'s config: its url is where it goes; a protocol or streaming it cannot do is refused', async () => {
  const dir = scratchDir('chorus-request-config-');
  const file = (config: Record<string, unknown>): string => {
    const path = join(dir, `${Object.keys(config).join('-')}.json`);
    writeFileSync(path, JSON.stringify({ config, request: [{ name: 'input_ids', data: [[5, 6]], dtype: 'uint32' }] }));
    return path;
  };
  const unreachable = await chorus('infer', '--request', file({ url: 'http://127.0.0.1:1' }));
  assert.equal(unreachable.status, 1);
  assert.match(unreachable.stderr, /no answer from http:\/\/127\.0\.0\.1:1\/v2\/models\/fastertransformer\/infer/);
  const grpcFile = await chorus('infer', '--request', file({ protocol: 'grpc' }));
  assert.match(grpcFile.stderr, /config\.protocol must be "http" \(chorus infer sends KServe v2 over HTTP\), got "grpc"/);
  const streamed = await chorus('infer', '--request', file({ stream_api: true }));
  assert.match(streamed.stderr, /config\.stream_api must be false/);
});
