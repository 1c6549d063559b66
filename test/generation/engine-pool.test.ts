import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { instancePlacements, rankGpus } from '../../src/generation/engines/index.ts';
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

test('tensor_parallel takes each instance\'s GPUs N at a time, a CUDA provider per rank', () => {
  const base = { engine: 'generate' as const, source: 'x', tensor_parallel: 2 };
  const gpu = (deviceId: number) => ({ name: 'cuda', deviceId });
  assert.deepEqual(instancePlacements({ ...base, device: 'cuda:1' }), [[gpu(1), gpu(2)]]);
  // Two instances of two ranks on four GPUs.
  assert.deepEqual(instancePlacements({ ...base, device: 'cuda', instance_group: [{ kind: 'gpu', gpus: [0, 1, 2, 3] }] }), [[gpu(0), gpu(1)], [gpu(2), gpu(3)]]);
  assert.deepEqual(rankGpus(instancePlacements({ ...base, device: 'cuda', instance_group: [{ kind: 'gpu', gpus: [3, 2] }] })[0]!), [3, 2]);
  assert.deepEqual(instancePlacements({ ...base, instance_group: [{ count: 2 }] }), [['cpu'], ['cpu']]);
  assert.throws(() => instancePlacements({ ...base, device: 'cuda', instance_group: [{ kind: 'gpu', gpus: [0, 1, 2] }] }), /tensor_parallel 2 runs each instance on 2 GPUs, and instance_group\[0\]\.gpus lists 3 \(0, 1, 2\): list a multiple of 2/);
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
