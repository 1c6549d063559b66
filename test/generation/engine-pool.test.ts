import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { instancePlacements } from '../../src/generation/engines/index.ts';
import { EnginePool, OrtEngine } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

test('instance_group places one session per count on cpu or on each listed GPU', () => {
  const base = { engine: 'generate' as const, source: 'x' };
  assert.deepEqual(instancePlacements(base), [['cpu']]);
  assert.deepEqual(instancePlacements({ ...base, device: 'cuda:1' }), [[{ name: 'cuda', deviceId: 1 }]]);
  assert.deepEqual(instancePlacements({ ...base, device: 'cuda', instance_group: [{ count: 2, kind: 'gpu', gpus: [0, 1] }] }), [
    [{ name: 'cuda', deviceId: 0 }],
    [{ name: 'cuda', deviceId: 0 }],
    [{ name: 'cuda', deviceId: 1 }],
    [{ name: 'cuda', deviceId: 1 }],
  ]);
  assert.deepEqual(instancePlacements({ ...base, instance_group: [{ count: 2 }, { kind: 'gpu' }] }), [['cpu'], ['cpu'], [{ name: 'cuda', deviceId: 0 }]]);
});

test('a pool of engines spreads requests over its instances, and each gets what one engine gives', async () => {
  const dir = join(scratchDir('chorus-pool-'), 'stories');
  buildModel({ source: `${STORIES}/stories260K.bin`, out: dir });
  const single = await OrtEngine.open(dir);
  const pool = new EnginePool([await OrtEngine.open(dir), await OrtEngine.open(dir)]);
  const prompts = Array.from({ length: 8 }, (_, i) => [1, 300 + i * 7]);
  const run = (engine: OrtEngine | EnginePool, prompt: number[]) => lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 20 } }).pipe(toArray()));
  const alone = [];
  for (const p of prompts) alone.push((await run(single, p)).map((e) => e.token));
  const pooled = await Promise.all(prompts.map((p) => run(pool, p)));
  assert.deepEqual(pooled.map((events) => events.map((e) => e.token)), alone);
  const [a, b] = pool.instances.map((e) => e.stats().requestsFinished);
  assert.equal(a! + b!, 8);
  assert.ok(a! > 0 && b! > 0, `both instances served (${a}, ${b})`);
  assert.equal(pool.stats().requestsFinished, 8);
  await single.close();
  await pool.close();
});
