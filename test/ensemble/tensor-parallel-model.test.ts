import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { ModelStore } from '../../src/ensemble/model-store.ts';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { loadRepository } from '../../src/repository/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

process.env.CHORUS_CACHE = scratchDir('chorus-cache-');
const { addon, reason } = loadNative();

test('a model definition with tensor_parallel: 2 builds split, loads its instances on CPU ranks and answers as the unsplit model', { skip: addon === undefined ? `the native addon: ${reason}` : false }, async () => {
  const dir = scratchDir('chorus-tp-repository-');
  mkdirSync(join(dir, 'models'));
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: join(dir, 'ckpt') });
  writeFileSync(join(dir, 'models', 'whole.yaml'), 'engine: generate\nsource: ./ckpt\nnative_engine: true\n');
  writeFileSync(join(dir, 'models', 'split.yaml'), 'engine: generate\nsource: ./ckpt\nnative_engine: true\ntensor_parallel: 2\ninstance_group: [{ count: 2 }]\n');
  writeFileSync(join(dir, 'models', 'typescript.yaml'), 'engine: generate\nsource: ./ckpt\nnative_engine: false\ntensor_parallel: 2\n');
  const { repository, diagnostics } = loadRepository(dir);
  assert.deepEqual(diagnostics.filter((d) => d.severity === 'error'), []);
  const logs: string[] = [];
  const store = new ModelStore(repository, { log: (line) => logs.push(line) });
  const generate = async (name: string, prompt: number[]): Promise<number[]> => {
    const model = await store.model(name);
    if (model.engine !== 'generate') throw new Error(`${name} is not a generate model`);
    const events = await lastValueFrom(model.generator.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 16 } }).pipe(toArray()));
    return events.map((e) => e.token);
  };
  const prompts = [[5, 6, 7], [9, 10, 11, 12], [40, 41]];
  const want = await Promise.all(prompts.map((p) => generate('whole', p)));
  assert.deepEqual(await Promise.all(prompts.map((p) => generate('split', p))), want);
  // Each of the two instances logged its ranks' shares.
  assert.equal(logs.filter((line) => /^model split: tensor_parallel 2: CPU rank 0 .* of weights and .* of cache; CPU rank 1 /.test(line)).length, 2, logs.join('\n'));
  // Split models run on the native engine only: the build says so for native_engine: false.
  await assert.rejects(store.model('typescript'), /model typescript failed to load: tensor_parallel 2 writes the slot and paged decoders the native engine runs/);
  await store.close();
});

test('paged_cache in a model definition picks the native engine cache; without the native engine it is refused', { skip: addon === undefined ? `the native addon: ${reason}` : false }, async () => {
  const dir = scratchDir('chorus-paged-repository-');
  mkdirSync(join(dir, 'models'));
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 4, out: join(dir, 'ckpt') });
  const model = (extra: string): string => `engine: generate\nsource: ./ckpt\nmax_batch_size: 2\nmax_sequence_length: 64\n${extra}\n`;
  writeFileSync(join(dir, 'models', 'paged.yaml'), model('native_engine: true\npaged_cache: true'));
  writeFileSync(join(dir, 'models', 'slots.yaml'), model('native_engine: true\npaged_cache: false'));
  writeFileSync(join(dir, 'models', 'typescript.yaml'), model('native_engine: false\npaged_cache: true'));
  writeFileSync(join(dir, 'models', 'wrong.yaml'), model('native_engine: true\npaged_cache: sometimes'));
  const { repository, diagnostics } = loadRepository(dir);
  const errors = diagnostics.filter((d) => d.severity === 'error');
  assert.equal(errors.length, 1, JSON.stringify(errors));
  assert.match(errors[0]!.message, /paged_cache/);
  const logs: string[] = [];
  const store = new ModelStore(repository, { log: (line) => logs.push(line) });
  const ids = async (name: string): Promise<number[]> => {
    const m = await store.model(name);
    if (m.engine !== 'generate') throw new Error(`${name} is not a generate model`);
    const events = await lastValueFrom(m.generator.submit({ inputIds: [5, 6, 7, 8], params: { temperature: 0, request_output_len: 12 } }).pipe(toArray()));
    return events.map((e) => e.token);
  };
  assert.deepEqual(await ids('paged'), await ids('slots'));
  assert.ok(logs.some((line) => /^model paged: paged cache: \d+ tokens in \d+ blocks/.test(line)), logs.join('\n'));
  assert.ok(!logs.some((line) => /^model slots: paged cache/.test(line)), logs.join('\n'));
  await assert.rejects(store.model('typescript'), /model typescript failed to load: .*paged_cache is the native engine's/);
  await store.close();
});
