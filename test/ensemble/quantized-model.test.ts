import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import type { Engine } from '../../src/generation/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { storiesRepository } from '../helpers/server.ts';

// A cache of its own, so the model is built here (and its build's log line names the directory).
process.env.CHORUS_CACHE = scratchDir('chorus-cache-');

async function greedy(engine: Engine, inputIds: number[], length: number): Promise<number[]> {
  const events = await lastValueFrom(engine.submit({ inputIds, params: { temperature: 0, request_output_len: length } }).pipe(toArray()));
  return events.map((e) => e.token);
}

// A model definition's weights and group_size reach the build, on whichever engine the CPU defaults to.
describe('a model definition with quantized weights', () => {
  let service: Service;
  const lines: string[] = [];
  before(() => {
    const repository = storiesRepository({
      stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n`,
      'stories-int4': `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nweights: int4\ngroup_size: 32\nmax_batch_size: 2\n`,
      'stories-int4-ts': `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nweights: int4\ngroup_size: 32\nnative_engine: false\n`,
    });
    service = Service.open(repository, { log: (line) => void lines.push(line) });
  });
  after(async () => {
    for (const name of ['stories-int4', 'stories-int4-ts']) {
      const model = await service.store.model(name);
      if (model.engine === 'generate') await model.generator.close();
    }
  });

  test('builds int4 in groups of 32, and both engines decode the same greedy ids from it', async () => {
    const native = await service.store.model('stories-int4');
    const typescript = await service.store.model('stories-int4-ts');
    assert.ok(native.engine === 'generate' && typescript.engine === 'generate');
    const expected = await greedy(typescript.generator, [1, 403, 407, 300], 32);
    assert.equal(expected.length, 32);
    assert.deepEqual(await greedy(native.generator, [1, 403, 407, 300], 32), expected);
    const built = lines.map((line) => /building .* into (\S+)/.exec(line)?.[1]).filter((dir): dir is string => dir !== undefined);
    assert.ok(built.length > 0, lines.join('\n'));
    const info = JSON.parse(readFileSync(join(built[0]!, 'chorus_build.json'), 'utf8')) as { weights?: { weights: string; groupSize: number } };
    assert.deepEqual([info.weights?.weights, info.weights?.groupSize], ['int4', 32]);
    assert.ok(lines.some((line) => /model stories-int4: cache: .*; weights .* \(int4 projections, fp32 activations\)/.test(line)), lines.join('\n'));
  });
});
