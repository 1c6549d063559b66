/** `chorus serve` as a process: SIGTERM lets the request in flight finish, refuses new ones, exits 0. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';
import { sseData } from '../helpers/server.ts';

for (const threads of ['1', '2']) test(`SIGTERM (${threads} HTTP thread${threads === '1' ? '' : 's'}): the streaming request in flight finishes, new connections are refused, the process exits 0`, async () => {
  const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', '--repository', join(ROOT, 'test/fixtures/repositories/ensembles'), '--port', '0', '--grpc-port', '0', '--quiet', '--shutdown-timeout', '20', '--http-threads', threads], { cwd: ROOT });
  let stderr = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /serving .* on (http:\/\/[\d.:]+)/.exec(stderr);
      if (match) resolve(match[1]!);
    });
    child.on('exit', () => reject(new Error(`the server exited early: ${stderr}`)));
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const response = await fetch(`${url}/v2/models/stories/generate_stream`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: '', max_tokens: 200, temperature: 0.8 }) });
  const reader = response.body!.getReader();
  let body = '';
  body += new TextDecoder().decode((await reader.read()).value);
  child.kill('SIGTERM');
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    body += new TextDecoder().decode(value);
  }
  const events = sseData(body).map((e) => JSON.parse(e) as { text_output: string; finish_reason?: string });
  assert.equal(events.at(-1)!.finish_reason, 'length', 'the request in flight ran to its end');
  assert.equal(await exited, 0);
  assert.match(stderr, /chorus: SIGTERM: finishing in-flight requests/);
  if (threads !== '1') assert.match(stderr, new RegExp(`serving .* \\(${threads} HTTP threads\\)`));
  assert.match(stderr, /chorus: stopped/);
  await assert.rejects(fetch(`${url}/v2/health/live`), /fetch failed/);
});
