import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom } from 'rxjs';
import { DynamicBatcher } from '../../src/ensemble/index.ts';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { openSessionCount } from '../../src/runtime/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** A batcher over a fake model that records each batch's rows and how many ran at once. */
function recorder(options: ConstructorParameters<typeof DynamicBatcher<number, number>>[0]) {
  const batches: number[][] = [];
  let running = 0;
  let mostAtOnce = 0;
  const batcher = new DynamicBatcher<number, number>(options, () => 1, async (_instance, inputs) => {
    batches.push(inputs);
    mostAtOnce = Math.max(mostAtOnce, ++running);
    await new Promise((resolve) => setTimeout(resolve, 20));
    running--;
    return inputs.map((x) => x * 10);
  });
  return { batcher, batches, mostAtOnce: () => mostAtOnce };
}

test('the dynamic batcher forms preferred batches at once, waits up to the delay for the rest, and uses every instance', async () => {
  const { batcher, batches, mostAtOnce } = recorder({ maxBatchSize: 8, preferredBatchSizes: [4], maxQueueDelayMicros: 50_000, instances: 2 });
  const started = performance.now();
  const outputs = await Promise.all(Array.from({ length: 10 }, (_, i) => batcher.submit(i)));
  assert.deepEqual(outputs, Array.from({ length: 10 }, (_, i) => i * 10));
  assert.deepEqual(batches, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]);
  assert.equal(mostAtOnce(), 2);
  // The last two waited for company until the delay ran out.
  assert.ok(performance.now() - started >= 45);
  assert.deepEqual(batcher.stats, { executions: 3, requests: 10, rows: 10 });
  // Without a delay, whatever waits runs at once.
  const eager = recorder({ maxBatchSize: 8 });
  await Promise.all([eager.batcher.submit(1), eager.batcher.submit(2)]);
  assert.deepEqual(eager.batches, [[1], [2]]);
});

test('encode models batch concurrent requests across instances, and each gets what it gets alone', async () => {
  const dir = scratchDir('chorus-batching-');
  makeCheckpoint({ arch: 't5', size: 'tiny', seed: 9, out: join(dir, 'ckpt') });
  for (const folder of ['tokenizers', 'models', 'ensembles']) mkdirSync(join(dir, folder));
  writeFileSync(join(dir, 'tokenizers/tok.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  const ensemble = `inputs:\n  text: { datatype: BYTES, dims: [1] }\noutputs:\n  hidden: { datatype: FP32, dims: [-1, -1] }\nsteps:\n  - name: tok\n    tokenize: tok\n    inputs: { text: text }\n    outputs: { input_ids: _ids, input_lengths: _n }\n  - name: enc\n    encode: MODEL\n    inputs: { input_ids: _ids, input_lengths: _n }\n    outputs: { last_hidden_state: hidden }\n`;
  writeFileSync(join(dir, 'models/batched.yaml'), `engine: encode\nsource: ckpt\nmax_batch_size: 8\ninstance_group: [{ count: 2 }]\ndynamic_batching: { preferred_batch_size: [4], max_queue_delay_microseconds: 200000 }\n`);
  writeFileSync(join(dir, 'models/single.yaml'), 'engine: encode\nsource: ckpt\n');
  writeFileSync(join(dir, 'ensembles/batched.yaml'), ensemble.replace('MODEL', 'batched'));
  writeFileSync(join(dir, 'ensembles/single.yaml'), ensemble.replace('MODEL', 'single'));
  const service = Service.open(dir, { log: () => {} });
  const texts = ['Once upon a time', 'Lily', 'She loved to play outside in the park with her friends', 'The cat sat', 'A big red ball', 'Tim', 'They ran and ran until the sun went down', 'Yes'];
  const run = (name: string, text: string) => lastValueFrom(service.ensemble(name).run({ text: { datatype: 'BYTES', shape: [1, 1], data: [text] } }));
  const alone: Array<Record<string, { shape: number[]; data: unknown[] }>> = [];
  for (const text of texts) alone.push(await run('single', text));
  const before = openSessionCount();
  const together = await Promise.all(texts.map((text) => run('batched', text)));
  assert.equal(openSessionCount(), before + 2, 'two instances');
  const model = await service.store.model('batched');
  assert.ok(model.engine === 'encode');
  assert.deepEqual(model.batcher.stats, { executions: 2, requests: 8, rows: 8 });
  together.forEach((out, i) => {
    assert.deepEqual(out.hidden!.shape, alone[i]!.hidden!.shape);
    const diff = Math.max(...out.hidden!.data.map((v, j) => Math.abs((v as number) - (alone[i]!.hidden!.data[j] as number))));
    assert.ok(diff < 1e-5, `request ${i}: max |diff| ${diff}`);
  });
  await service.close();
  assert.equal(openSessionCount(), before - 1, 'unloading released both instances and the single model');
});
