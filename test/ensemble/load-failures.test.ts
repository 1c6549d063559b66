import assert from 'node:assert/strict';
import { closeSync, ftruncateSync, mkdirSync, openSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ModelStore } from '../../src/ensemble/model-store.ts';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadRepository } from '../../src/repository/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

process.env.CHORUS_CACHE = scratchDir('chorus-cache-');

test('a model whose build fails answers one 503 naming it, the cause and the remedy, and is built again only on load or a changed source', async () => {
  const dir = scratchDir('chorus-failing-');
  mkdirSync(join(dir, 'models'));
  writeFileSync(join(dir, 'models', 'broken.yaml'), 'engine: generate\nsource: ./ckpt\n');
  const checkpoint = join(dir, 'ckpt');
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: checkpoint });
  const file = join(checkpoint, 'model.safetensors');
  const size = statSync(file).size;
  const fd = openSync(file, 'r+');
  ftruncateSync(fd, size - 64);
  closeSync(fd);

  const { repository, diagnostics } = loadRepository(dir);
  assert.deepEqual(diagnostics.filter((d) => d.severity === 'error'), []);
  const logs: string[] = [];
  const store = new ModelStore(repository, { log: (line) => logs.push(line) });
  const builds = (): number => logs.filter((line) => line.includes('building ')).length;
  const expected = {
    code: 'CHORUS_MODEL_UNAVAILABLE',
    status: 503,
    message: `model broken failed to load: ${file} is truncated: its header needs ${size} bytes, the file has ${size - 64}; download it again. Fix that, then load it again (POST /v2/repository/models/broken/load) or change its source; until then it is not retried`,
  };
  await assert.rejects(store.model('broken'), expected);
  assert.equal(builds(), 1);
  assert.deepEqual(logs.filter((line) => line.includes('failed to load')), [expected.message]);

  // Later requests get the same answer without building again.
  await assert.rejects(store.model('broken'), expected);
  await assert.rejects(store.model('broken'), expected);
  assert.equal(builds(), 1);
  assert.deepEqual(store.index(), [{ name: 'broken', state: 'UNAVAILABLE', reason: expected.message }]);

  // An explicit load tries again.
  await assert.rejects(store.load('broken'), expected);
  assert.equal(builds(), 2);

  // A fixed source is picked up by the next request.
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: checkpoint });
  const model = await store.model('broken');
  assert.equal(model.engine, 'generate');
  assert.equal(builds(), 3);
  // The build logged its progress in steps of 10% of the weights, then its time and peak memory.
  const steps = logs.filter((line) => /^model broken: building: \d+% of the weights written \(.* of .*\)$/.test(line));
  assert.ok(steps.length >= 2 && steps.at(-1)!.includes('building: 100%'), steps.join('\n'));
  assert.equal(logs.filter((line) => /^model broken: built in [0-9.]+ s, peak RSS [0-9.]+ MB$/.test(line)).length, 1, logs.join('\n'));
  assert.deepEqual(store.index(), [{ name: 'broken', state: 'READY' }]);
  await store.close();
});
