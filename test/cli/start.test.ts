/**
 * `npm start` as a user runs it: a signal sent to the npm process (as a process manager or a terminal
 * sends it) stops the server it started, which frees its port. `chorus --version` prints package.json's.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Every process below `pid` (children, their children, ...), from /proc. */
function descendants(pid: number): number[] {
  const file = `/proc/${pid}/task/${pid}/children`;
  const children = existsSync(file) ? readFileSync(file, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number) : [];
  return children.flatMap((child) => [child, ...descendants(child)]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} sent to npm start stops the server it started and frees the port`, async () => {
    const port = await freePort();
    const npm = spawn('npm', ['start', '--', '--port', String(port), '--grpc-port', '0', '--quiet'], { cwd: ROOT, env: { ...process.env, HF_HUB_OFFLINE: '1', CHORUS_CACHE: scratchDir('chorus-start-') } });
    let stderr = '';
    await new Promise<void>((resolve, reject) => {
      npm.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        if (stderr.includes(`on http://127.0.0.1:${port}`)) resolve();
      });
      npm.on('exit', () => reject(new Error(`npm start exited early: ${stderr}`)));
    });
    const below = descendants(npm.pid!);
    try {
      assert.ok(below.length > 0, 'npm start runs the server as a child');
      assert.equal((await fetch(`http://127.0.0.1:${port}/v2/health/live`)).status, 200);
      const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
      npm.kill(signal);
      // A guard against hanging, not a speed check: the server's own shutdown deadline is 30 s.
      const code = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve('still running after 60 s'), 60_000).unref())]);
      assert.equal(code, 0, stderr);
      assert.match(stderr, new RegExp(`chorus: ${signal}: finishing in-flight requests`));
      assert.match(stderr, /chorus: stopped/);
      assert.deepEqual(below.filter(alive), [], 'no process npm started is left');
      await assert.rejects(fetch(`http://127.0.0.1:${port}/v2/health/live`), /fetch failed/);
    } finally {
      for (const pid of [npm.pid!, ...below].filter(alive)) process.kill(pid, 'SIGKILL');
    }
  });
}

test('chorus --version prints the version of package.json', () => {
  const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  for (const flag of ['--version', '-V']) assert.equal(execFileSync(process.execPath, [join(ROOT, 'bin/chorus.js'), flag], { encoding: 'utf8' }), `${version}\n`);
});
