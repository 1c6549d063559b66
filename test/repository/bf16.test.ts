import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadRepository } from '../../src/repository/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

process.env.CHORUS_CACHE = scratchDir('chorus-cache-');

function diagnostics(models: Record<string, string>): string[] {
  const dir = scratchDir('chorus-bf16-repo-');
  mkdirSync(join(dir, 'models'));
  mkdirSync(join(dir, 'ckpt'));
  for (const [name, text] of Object.entries(models)) writeFileSync(join(dir, 'models', `${name}.yaml`), text);
  return loadRepository(dir).diagnostics.map((d) => `${d.severity} ${d.line}: ${d.message}`);
}

test('dtype bf16 is for GPUs and the native engine: on the CPU, without the native engine or with GreedySearch it fails validation, saying so', () => {
  assert.deepEqual(diagnostics({ gpu: 'engine: generate\nsource: ./ckpt\ndevice: cuda\ndtype: bf16\n' }), []);
  assert.deepEqual(diagnostics({ cpu: 'engine: generate\nsource: ./ckpt\ndtype: bf16\ngreedy_search: true\nnative_engine: false\n' }), [
    'error 3: dtype bf16 runs on GPUs (device cuda or cuda:N); on the CPU models run in fp32: set dtype fp32 or device cuda',
    "error 4: greedy_search needs dtype fp16 or fp32 (ONNX Runtime's GreedySearch has no bfloat16)",
    'error 5: dtype bf16 runs on the native engine; native_engine false needs dtype fp16 or fp32',
  ]);
});
