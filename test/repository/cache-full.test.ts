/**
 * A hub download into a cache whose disk fills up: the fetch fails naming the cache entry and the full
 * disk (not an unreachable hub, which would serve a fallback), leaves nothing behind, and succeeds
 * once there is room. The disk is a 256 KiB tmpfs where this process may mount one (root), else a
 * 256 KiB file-size limit (`ulimit -f`) on the fetching process.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, test } from 'node:test';
import { startHubServer } from '../helpers/hub-server.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const mounted: string[] = [];
after(() => {
  for (const dir of mounted) execFileSync('umount', [dir]);
});

test('a hub download onto a full disk fails naming the entry and the disk, and leaves nothing', async () => {
  const weights = Buffer.alloc(600 * 1024, 7);
  const hub = await startHubServer({ 'acme/big': { 'config.json': Buffer.from('{"model_type":"llama"}'), 'model.safetensors': weights } });
  const cache = scratchDir('chorus-full-hub-');
  let tmpfs = true;
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', cache], { stdio: 'ignore' });
    mounted.push(cache);
  } catch {
    tmpfs = false;
  }
  // Asynchronously: the hub answers from this process.
  const fetch = async (limitKiB?: number): Promise<string> => {
    const command = [process.execPath, '--import', 'tsx', join(ROOT, 'test/helpers/hub-fetch.ts'), 'acme/big'];
    const [file, args] = limitKiB === undefined ? [command[0]!, command.slice(1)] : ['bash', ['-c', `ulimit -f ${limitKiB} && exec "$@"`, 'bash', ...command]];
    return (await promisify(execFile)(file, args, { cwd: ROOT, env: { ...process.env, HF_ENDPOINT: hub.url, CHORUS_CACHE: cache }, encoding: 'utf8' })).stdout.trim();
  };
  try {
    const failed = await fetch(tmpfs ? undefined : 256);
    assert.match(failed, tmpfs ? /^CHORUS_CACHE_FAILED: cannot write the cache entry \S+acme--big\/main: the disk is full \(ENOSPC\)/ : /^CHORUS_CACHE_FAILED: cannot write the cache entry \S+acme--big\/main: a file grew past the size allowed \(EFBIG\)/);
    assert.deepEqual(readdirSync(join(cache, 'hf', 'acme--big')), [], 'neither the entry nor a temporary directory is left');
    if (tmpfs) execFileSync('mount', ['-o', 'remount,size=2m', cache]);
    assert.equal(await fetch(), 'ok');
    assert.deepEqual(readFileSync(join(cache, 'hf/acme--big/main/model.safetensors')), weights);
    assert.equal(existsSync(join(cache, 'hf/acme--big/main.lock')), false);
  } finally {
    await hub.close();
  }
});
