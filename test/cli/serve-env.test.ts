/** `chorus serve` configured by environment variables (as in a container), the command line winning. */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildProgram } from '../../src/cli/main.ts';
import { SERVE_ENV } from '../../src/cli/serve.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const REPOSITORY = join(ROOT, 'test/fixtures/repositories/ensembles');

/** Starts `chorus serve` with `env` added and `args`; resolves with its URL once it listens. */
async function serve(env: Record<string, string>, args: string[] = []): Promise<{ url: string; stop(): Promise<{ code: number | null; stderr: string }> }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', ...args], { cwd: ROOT, env: { ...process.env, CHORUS_CACHE: scratchDir('chorus-cache-'), CHORUS_GRPC_PORT: '0', ...env } });
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /serving .* on (http:\/\/[\d.:]+)/.exec(stderr);
      if (match) resolve(match[1]!);
    });
    child.on('exit', () => reject(new Error(`the server exited early: ${stderr}`)));
  });
  return {
    url,
    stop: async () => {
      child.kill('SIGTERM');
      return { code: await exited, stderr };
    },
  };
}

test('every serve flag in SERVE_ENV reads its environment variable, and docs/deploy.md lists each with its flag', () => {
  const serveCommand = buildProgram().commands.find((c) => c.name() === 'serve')!;
  const envs = new Map(serveCommand.options.map((o) => [o.attributeName(), o.envVar]));
  for (const [attribute, variable] of Object.entries(SERVE_ENV)) assert.equal(envs.get(attribute), variable, `--${attribute}`);
  assert.equal(envs.get('repository'), 'CHORUS_REPOSITORY');
  const documented = readFileSync(join(ROOT, 'docs/deploy.md'), 'utf8');
  for (const [attribute, variable] of envs) if (variable !== undefined) assert.match(documented, new RegExp(`\\| \`${variable}\` \\| \`--${attribute.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}\``), `docs/deploy.md's table has ${variable}`);
});

test('CHORUS_REPOSITORY, CHORUS_HOST, CHORUS_PORT, CHORUS_LOAD and CHORUS_SHUTDOWN_TIMEOUT configure chorus serve', async () => {
  const server = await serve({ CHORUS_REPOSITORY: REPOSITORY, CHORUS_HOST: '127.0.0.1', CHORUS_PORT: '0', CHORUS_LOAD: 'stories', CHORUS_SHUTDOWN_TIMEOUT: '7', CHORUS_QUIET: '1' });
  const index = (await (await fetch(`${server.url}/v2/repository/index`, { method: 'POST' })).json()) as Array<{ name: string; state: string }>;
  const { code, stderr } = await server.stop();
  assert.deepEqual(index.find((m) => m.name === 'stories'), { name: 'stories', version: '1', state: 'READY' }, 'loaded before the port opened');
  assert.match(stderr, new RegExp(`serving ${REPOSITORY.replace(/\/$/, '')}/? on http://127\\.0\\.0\\.1:\\d+`));
  assert.match(stderr, /at most 7 s/);
  assert.equal(code, 0);
});

test('a flag on the command line wins over its environment variable', async () => {
  const server = await serve({ CHORUS_REPOSITORY: REPOSITORY, CHORUS_PORT: '1', CHORUS_SHUTDOWN_TIMEOUT: '7', CHORUS_QUIET: '1' }, ['--port', '0', '--shutdown-timeout', '3']);
  const { code, stderr } = await server.stop();
  assert.match(stderr, /at most 3 s/);
  assert.equal(code, 0);
});

test('a bad value from the environment is refused as the flag would be, and an unknown model to load by name', () => {
  const run = (env: Record<string, string>): { status: number | null; stderr: string } => {
    const result = spawnSync(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, CHORUS_REPOSITORY: REPOSITORY, CHORUS_PORT: '0', CHORUS_GRPC_PORT: '0', ...env } });
    return { status: result.status, stderr: result.stderr };
  };
  const port = run({ CHORUS_PORT: 'eighty' });
  assert.equal(port.status, 1);
  assert.match(port.stderr, /--port must be an integer in \[0, 65535\], got "?eighty"?/);
  const load = run({ CHORUS_LOAD: 'stories,nope' });
  assert.equal(load.status, 1);
  assert.match(load.stderr, /nope/);
});
