/**
 * `chorus serve` over a cache that fails under it. A full disk: a model whose build does not fit fails
 * its requests naming the cache and the full disk, leaves no partial entry, and the other model keeps
 * answering. The disk is a 256 KiB tmpfs mounted under the cache where this process may mount (root),
 * else a 256 KiB file-size limit (RLIMIT_FSIZE, `ulimit -f`) on the server. A server killed (SIGKILL)
 * while it builds: the next one started on the same cache builds the model and answers.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const mounted: string[] = [];
after(() => {
  for (const dir of mounted) execFileSync('umount', [dir]);
});

/** A repository: `healthy` (built, outside the cache) and `fresh` (a llama checkpoint built into the cache on first use). */
function repository(): string {
  const root = scratchDir('chorus-faults-');
  buildModel({ source: `${STORIES}/stories260K.bin`, out: join(root, 'healthy') });
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 5, out: join(root, 'fresh') });
  const repo = join(root, 'repository');
  for (const folder of ['models', 'pipelines', 'tokenizers']) mkdirSync(join(repo, folder), { recursive: true });
  writeFileSync(join(repo, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  for (const name of ['healthy', 'fresh']) {
    writeFileSync(join(repo, `models/${name}.yaml`), `engine: generate\nsource: ${join(root, name)}\ntokenizer: stories\n`);
    writeFileSync(join(repo, `pipelines/${name}.yaml`), `model: ${name}\ndefaults: { max_tokens: 8, temperature: 0 }\n`);
  }
  return repo;
}

interface Served {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  /** Resolves when the server's log holds `pattern`. */
  logged(pattern: RegExp): Promise<void>;
  exited: Promise<unknown>;
}

async function serve(repo: string, cache: string, fileSizeLimitKiB?: number): Promise<Served> {
  const command = [process.execPath, join(ROOT, 'bin/chorus.js'), 'serve', '--repository', repo, '--port', '0', '--grpc-port', '0', '--quiet'];
  const [file, args] = fileSizeLimitKiB === undefined ? [command[0]!, command.slice(1)] : ['bash', ['-c', `ulimit -f ${fileSizeLimitKiB} && exec "$@"`, 'bash', ...command]];
  const child = spawn(file, args, { cwd: ROOT, env: { ...process.env, CHORUS_CACHE: cache, HF_HUB_OFFLINE: '1' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const waiting: Array<{ pattern: RegExp; resolve: () => void }> = [];
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    for (const w of waiting) if (w.pattern.test(stderr)) w.resolve();
  });
  const logged = (pattern: RegExp): Promise<void> => new Promise((resolve) => (pattern.test(stderr) ? resolve() : waiting.push({ pattern, resolve })));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  await Promise.race([logged(/serving .* on http/), exited.then(() => assert.fail(`chorus serve exited: ${stderr}`))]);
  return { child, url: /on (http:\/\/[\d.:]+)/.exec(stderr)![1]!, stderr: () => stderr, logged, exited };
}

async function generate(url: string, pipeline: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`${url}/v2/models/${pipeline}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: 'Once upon a time' }) });
  return { status: response.status, text: await response.text() };
}

/** Temporary or replaced entries left under the cache's builds. */
function leftovers(cache: string): string[] {
  return existsSync(join(cache, 'builds')) ? readdirSync(join(cache, 'builds')).filter((name) => /\.(tmp|old)-/.test(name)) : [];
}

/** A 256 KiB tmpfs at `dir`, when this process may mount one. */
function smallDisk(dir: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', dir], { stdio: 'ignore' });
    mounted.push(dir);
    return true;
  } catch {
    return false;
  }
}

test('a full disk under the cache: the model that needs a build fails saying so, the other keeps answering', async () => {
  const cache = scratchDir('chorus-full-');
  const tmpfs = smallDisk(cache);
  const server = await serve(repository(), cache, tmpfs ? undefined : 256);
  try {
    for (let attempt = 0; attempt < 2; attempt++) {
      const failed = await generate(server.url, 'fresh');
      assert.ok(failed.status >= 500, failed.text);
      assert.match(failed.text, tmpfs ? /cannot write the cache entry \S+: the disk is full \(ENOSPC\)/ : /cannot write the cache entry \S+: a file grew past the size allowed \(EFBIG\)/);
      const healthy = await generate(server.url, 'healthy');
      assert.equal(healthy.status, 200, healthy.text);
    }
    assert.deepEqual(leftovers(cache), []);
    assert.equal(existsSync(join(cache, 'builds')) && readdirSync(join(cache, 'builds')).some((name) => !name.endsWith('.lock')), false, 'no entry was left');
    assert.equal((await fetch(`${server.url}/v2/health/live`)).status, 200);
  } finally {
    server.child.kill('SIGKILL');
    await server.exited;
  }
});

test('a server killed while it builds: the next one on the same cache builds the model and answers', async () => {
  const cache = scratchDir('chorus-killed-');
  const repo = repository();
  const first = await serve(repo, cache);
  const request = generate(first.url, 'fresh').catch(() => undefined);
  await first.logged(/model fresh: building /);
  first.child.kill('SIGKILL');
  await first.exited;
  await request;
  const second = await serve(repo, cache);
  try {
    const answer = await generate(second.url, 'fresh');
    assert.equal(answer.status, 200, `${answer.text}\n${second.stderr()}`);
    assert.match(second.stderr(), /waiting for another process writing/);
    assert.deepEqual(leftovers(cache), []);
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
  }
});
