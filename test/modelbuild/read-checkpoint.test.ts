import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { checkpointKind, readCheckpoint } from '../../src/modelbuild/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const FIXTURES = new URL('../fixtures/checkpoints/', import.meta.url).pathname;

test('checkpointKind() tells each build source by what it holds, not by its name alone', () => {
  const cases: Array<[string, string]> = [
    ['gpt2/hf', 'hf'],
    ['gpt2/bin', 'hf'],
    ['llama/bin', 'hf'],
    ['pt/model.pt', 'torch-file'],
    ['legacy/pytorch_model.bin', 'torch-file'],
    ['megatron/v0', 'megatron'],
    ['megatron/v3', 'megatron'],
    ['nemo/gpt-tp1.nemo', 'nemo'],
  ];
  for (const [source, kind] of cases) assert.equal(checkpointKind(join(FIXTURES, source)), kind, source);
  assert.equal(checkpointKind(`${STORIES}/stories260K.bin`), 'llama2c');
  // A llama2.c header whose dim is 128 starts with byte 0x80, as a pickle does; it is still llama2.c.
  const dir = scratchDir('chorus-kind-');
  const header = Buffer.alloc(28);
  header.writeInt32LE(128, 0);
  writeFileSync(join(dir, 'model.bin'), header);
  assert.equal(checkpointKind(join(dir, 'model.bin')), 'llama2c');
  mkdirSync(join(dir, 'unpacked'));
  writeFileSync(join(dir, 'unpacked', 'model_config.yaml'), 'num_layers: 1\n');
  assert.equal(checkpointKind(join(dir, 'unpacked')), 'nemo');
});

test('a .pt state dict without a config.json beside it is refused, saying where to put one', () => {
  const dir = scratchDir('chorus-no-config-');
  writeFileSync(join(dir, 'model.pt'), readFileSync(join(FIXTURES, 'pt/model.pt')));
  assert.throws(() => readCheckpoint(join(dir, 'model.pt')), { code: 'CHORUS_FILE_MISSING', message: `${join(dir, 'model.pt')} is a PyTorch state dict, which holds no model config: put the model's config.json beside it (in ${dir})` });
});
