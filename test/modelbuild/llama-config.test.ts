import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-llama-config-');

function withConfig(name: string, edit: (config: Record<string, unknown>) => void): string {
  const dir = join(root, name);
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 1, out: dir });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  edit(config);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  return dir;
}

test("transformers 5's rope_parameters give the rotary base, as rope_theta does", () => {
  const v5 = withConfig('v5', (c) => {
    delete c.rope_theta;
    c.rope_parameters = { rope_type: 'default', rope_theta: 500000.0 };
  });
  buildModel({ source: v5, out: `${v5}-onnx` });
  assert.deepEqual(buildSpec<{ positions: unknown }>(`${v5}-onnx`).positions, { kind: 'rotary', theta: 500000 });
  const v4 = withConfig('v4', (c) => {
    c.rope_theta = 500000.0;
    c.rope_scaling = null;
  });
  buildModel({ source: v4, out: `${v4}-onnx` });
  assert.deepEqual(buildSpec<{ positions: unknown }>(`${v4}-onnx`).positions, { kind: 'rotary', theta: 500000 });
});

test('scaled rotary embeddings are refused, naming the field and the type', () => {
  const llama3 = withConfig('llama3', (c) => {
    c.rope_scaling = { rope_type: 'llama3', factor: 8.0, rope_theta: 500000.0 };
  });
  assert.throws(() => buildModel({ source: llama3, out: `${llama3}-onnx` }), { code: 'CHORUS_UNSUPPORTED', message: /config\.json: rope_scaling of type llama3 is not supported yet/ });
});
