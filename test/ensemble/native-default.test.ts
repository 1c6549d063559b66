import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine } from '../../src/generation/index.ts';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { storiesRepository } from '../helpers/server.ts';

const { addon, reason } = loadNative();

async function greedy(engine: Engine, inputIds: number[], length: number): Promise<number[]> {
  const events = await lastValueFrom(engine.submit({ inputIds, params: { temperature: 0, request_output_len: length } }).pipe(toArray()));
  return events.map((e) => e.token);
}

// With the addon built (npm install builds it), a CPU model without native_engine runs on the native engine.
describe('the native engine as the CPU default', { skip: addon === undefined ? `the native addon: ${reason}` : false }, () => {
  let service: Service;
  before(() => {
    const gpt2 = join(scratchDir('chorus-native-default-'), 'gpt2');
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 7, out: gpt2 });
    const repository = storiesRepository({
      stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 4\n`,
      'stories-ts': `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nnative_engine: false\n`,
      gpt2: `engine: generate\nsource: ${gpt2}\ntokenizer: stories\nmax_batch_size: 4\n`,
      'gpt2-ts': `engine: generate\nsource: ${gpt2}\ntokenizer: stories\nnative_engine: false\n`,
    });
    service = Service.open(repository, { log: () => {} });
  });
  after(async () => {
    for (const name of ['stories', 'stories-ts', 'gpt2', 'gpt2-ts']) {
      const model = await service.store.model(name);
      if (model.engine === 'generate') await model.generator.close();
    }
  });

  for (const [name, ids] of [['stories', [1, 403, 407, 300]], ['gpt2', [5, 17, 300, 2, 41]]] as const) {
    test(`${name}: the default on the CPU is the native engine, whose greedy ids are the TypeScript engine's`, async () => {
      const native = await service.store.model(name);
      const typescript = await service.store.model(`${name}-ts`);
      assert.ok(native.engine === 'generate' && native.generator instanceof NativeEngine, `${name} runs on ${native.engine === 'generate' ? native.generator.constructor.name : native.engine}`);
      assert.ok(typescript.engine === 'generate' && typescript.generator instanceof OrtEngine);
      const expected = await greedy(typescript.generator, [...ids], 48);
      assert.equal(expected.length, 48);
      assert.deepEqual(await greedy(native.generator, [...ids], 48), expected);
    });
  }
});
