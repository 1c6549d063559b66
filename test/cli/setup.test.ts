/** `chorus setup cuda --install-only`: the part of the setup that a container build without a GPU can do. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

test('setup cuda --install-only skips the GPU check and reports a provider package that is not there', () => {
  const missing = join(scratchDir('chorus-setup-'), 'provider.tgz');
  const result = spawnSync(process.execPath, [join(ROOT, 'bin/chorus.js'), 'setup', 'cuda', '--install-only', '--from', missing], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(result.status, 1);
  assert.doesNotMatch(result.stdout, /NVIDIA GPU/);
  assert.match(result.stdout, new RegExp(`MISSING install provider: ${missing} does not exist`));
  assert.match(result.stdout, /run chorus setup cuda --install-only again/);
});
