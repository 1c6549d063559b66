/**
 * The cache shared by processes: two of them wanting the same fallback checkpoint and build get one
 * made once (the other waits and reads it whole), and a process killed mid-build leaves nothing that
 * stops the next one (its lock goes stale, its temporary directory is cleared).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeEntry } from '../../src/repository/cache-entry.ts';
import { isBuiltModel } from '../../src/repository/index.ts';
import { readSafetensors } from '../../src/modelbuild/safetensors.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

interface Writer {
  child: ChildProcess;
  /** Starts its work (once it said `ready`). */
  go(): Promise<void>;
  lines: string[];
  /** Resolves when a line matching `pattern` came. */
  saw(pattern: RegExp): Promise<void>;
  exited: Promise<number | null>;
}

function writer(cache: string, seed: number): Writer {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/helpers/cache-writer.ts'), String(seed)], { cwd: ROOT, env: { ...process.env, CHORUS_CACHE: cache }, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines: string[] = [];
  const waiting: Array<{ pattern: RegExp; resolve: () => void }> = [];
  let rest = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const parts = (rest + chunk.toString()).split('\n');
    rest = parts.pop()!;
    lines.push(...parts);
    for (const w of waiting) if (lines.some((l) => w.pattern.test(l))) w.resolve();
  });
  const saw = (pattern: RegExp): Promise<void> => new Promise((resolve) => (lines.some((l) => pattern.test(l)) ? resolve() : waiting.push({ pattern, resolve })));
  return {
    child,
    go: async () => {
      await saw(/^ready$/);
      child.stdin!.end('go\n');
    },
    lines,
    saw,
    exited: new Promise((resolve) => child.on('exit', (code) => resolve(code))),
  };
}

/** Names under the cache that are not finished entries (temporary or replaced directories). */
function leftovers(cache: string): string[] {
  return ['fallback', 'builds'].flatMap((kind) => (existsSync(join(cache, kind)) ? readdirSync(join(cache, kind)).filter((n) => /\.(tmp|old)-/.test(n)) : []));
}

test('two processes wanting the same checkpoint and build: one makes each, the other waits and reads it whole', async () => {
  const cache = scratchDir('chorus-cache-');
  const [first, second] = [writer(cache, 3), writer(cache, 3)];
  await second.saw(/^ready$/);
  await first.go();
  await first.saw(/^making a random gpt2 tiny checkpoint/);
  await second.go();
  assert.equal(await first.exited, 0, first.lines.join('\n'));
  assert.equal(await second.exited, 0, second.lines.join('\n'));
  const lines = [...first.lines, ...second.lines];
  assert.equal(lines.filter((l) => l.startsWith('making a random')).length, 1, lines.join('\n'));
  assert.equal(lines.filter((l) => /^building \S+ into /.test(l)).length, 1, lines.join('\n'));
  assert.ok(second.lines.some((l) => l.startsWith('waiting for another process writing')), [...first.lines, '--', ...second.lines].join('\n'));
  const dirs = [first, second].map((w) => w.lines.at(-1)!.replace(/^done /, ''));
  assert.equal(dirs[0], dirs[1]);
  assert.ok(isBuiltModel(dirs[0]!));
  const checkpoint = join(cache, 'fallback', 'gpt2-tiny-3');
  assert.ok(JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8')).n_embd > 0);
  assert.ok(readSafetensors(join(checkpoint, 'model.safetensors')).size > 0);
  assert.deepEqual(leftovers(cache), []);
  assert.equal(existsSync(`${checkpoint}.lock`), false);
});

test('a process killed mid-build: the next one takes the stale lock over, clears the leftovers and builds', async () => {
  const cache = scratchDir('chorus-cache-');
  const killed = writer(cache, 4);
  await killed.go();
  await killed.saw(/^building/);
  killed.child.kill('SIGKILL');
  await killed.exited;
  assert.ok(existsSync(join(cache, 'builds')) && readdirSync(join(cache, 'builds')).some((n) => n.endsWith('.lock')), 'the killed process left its lock');
  const next = writer(cache, 4);
  await next.go();
  assert.equal(await next.exited, 0, next.lines.join('\n'));
  assert.ok(next.lines.some((l) => l.startsWith('waiting for another process writing')), next.lines.join('\n'));
  assert.ok(isBuiltModel(next.lines.at(-1)!.replace(/^done /, '')));
  assert.deepEqual(leftovers(cache), []);
});

test('a write that fails leaves no entry and no temporary directory, and the next one succeeds', async () => {
  const dir = join(scratchDir('chorus-cache-'), 'entry');
  await assert.rejects(
    writeEntry(dir, async (tmp) => {
      writeFileSync(join(tmp, 'half'), 'x');
      throw new Error('the source went away');
    }),
    /the source went away/,
  );
  assert.equal(existsSync(dir), false);
  assert.deepEqual(readdirSync(join(dir, '..')), []);
  await writeEntry(dir, async (tmp) => writeFileSync(join(tmp, 'whole'), 'y'));
  assert.equal(readFileSync(join(dir, 'whole'), 'utf8'), 'y');
});
