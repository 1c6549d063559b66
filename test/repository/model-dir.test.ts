import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { builtModelDirectory, isBuiltModel, isDecoderOnlySource, tensorParallelBuild } from '../../src/repository/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

const FIXTURES = new URL('../fixtures/checkpoints/', import.meta.url).pathname;

test('isDecoderOnlySource() knows Megatron-LM and NeMo GPT checkpoints, pytorch_model.bin directories and .pt files by their config', () => {
  for (const source of ['megatron/v3', 'megatron/v0', 'nemo/gpt-tp2.nemo', 'gpt2/bin', 'pt/model.pt']) assert.equal(isDecoderOnlySource(join(FIXTURES, source)), true, source);
  const t5 = scratchDir('chorus-t5-config-');
  writeFileSync(join(t5, 'config.json'), JSON.stringify({ model_type: 't5' }));
  writeFileSync(join(t5, 'model.pt'), Buffer.from('PK\x03\x04'));
  assert.equal(isDecoderOnlySource(t5), false);
  assert.equal(isDecoderOnlySource(join(t5, 'model.pt')), false);
  // A NeMo T5 (its model_config.yaml's target) is an encoder-decoder.
  const nemoT5 = scratchDir('chorus-nemo-t5-config-');
  writeFileSync(join(nemoT5, 'model_config.yaml'), 'target: nemo.collections.nlp.models.language_modeling.megatron_t5_model.MegatronT5Model\n');
  assert.equal(isDecoderOnlySource(nemoT5), false);
});

test('a build split in 2 is its own cache entry, recognised as built, with its ranks under onnx/tp2', async () => {
  const cache = scratchDir('chorus-tp-cache-');
  const previous = process.env.CHORUS_CACHE;
  process.env.CHORUS_CACHE = cache;
  try {
    const source = join(scratchDir('chorus-tp-source-'), 'llama');
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: source });
    const options = { flavor: 'cuda' as const, slotDecoder: true };
    const split = await builtModelDirectory(source, { ...options, tensorParallel: 2 });
    const whole = await builtModelDirectory(source, options);
    assert.notEqual(split, whole);
    assert.equal(tensorParallelBuild(split), 2);
    assert.equal(tensorParallelBuild(whole), undefined);
    assert.equal(isBuiltModel(split), true);
    assert.ok(existsSync(join(split, 'onnx', 'tp2', 'rank1', 'decoder_model_paged.onnx')));
    assert.equal(await builtModelDirectory(source, { ...options, tensorParallel: 2 }), split, 'found in the cache');
  } finally {
    if (previous === undefined) delete process.env.CHORUS_CACHE;
    else process.env.CHORUS_CACHE = previous;
  }
});
