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

test("Llama 3's rope_scaling (or rope_parameters) is read into the spec; other scaling types are refused, naming the supported ones", () => {
  const rope = { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192 };
  const scaling = { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 };
  const v4 = withConfig('llama3-v4', (c) => {
    c.rope_theta = 500000.0;
    c.rope_scaling = { ...rope, rope_type: 'llama3' };
  });
  buildModel({ source: v4, out: `${v4}-onnx` });
  assert.deepEqual(buildSpec<{ positions: unknown }>(`${v4}-onnx`).positions, { kind: 'rotary', theta: 500000, scaling });
  const v5 = withConfig('llama3-v5', (c) => {
    delete c.rope_theta;
    c.rope_parameters = { ...rope, rope_type: 'llama3', rope_theta: 500000.0 };
  });
  buildModel({ source: v5, out: `${v5}-onnx` });
  assert.deepEqual(buildSpec<{ positions: unknown }>(`${v5}-onnx`).positions, { kind: 'rotary', theta: 500000, scaling });

  const yarn = withConfig('yarn', (c) => {
    c.rope_scaling = { rope_type: 'yarn', factor: 4.0, original_max_position_embeddings: 32768 };
  });
  assert.throws(() => buildModel({ source: yarn, out: `${yarn}-onnx` }), {
    code: 'CHORUS_UNSUPPORTED',
    param: 'rope_scaling.rope_type',
    message: /config\.json: rope_scaling of type "yarn" is not supported; supported: default, llama3/,
  });
  const incomplete = withConfig('llama3-incomplete', (c) => {
    c.rope_scaling = { rope_type: 'llama3', factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0 };
  });
  assert.throws(() => buildModel({ source: incomplete, out: `${incomplete}-onnx` }), { code: 'CHORUS_FILE_INVALID', message: /config\.json: rope_scaling\.original_max_position_embeddings must be a positive integer, got nothing/ });
  const partial = withConfig('partial', (c) => {
    c.partial_rotary_factor = 0.75;
  });
  assert.throws(() => buildModel({ source: partial, out: `${partial}-onnx` }), { code: 'CHORUS_UNSUPPORTED', param: 'partial_rotary_factor' });
});

test("Qwen's use_sliding_window gives the spec a window over the layers from max_window_layers on, or those layer_types names", () => {
  const qwen = (name: string, edit: (config: Record<string, unknown>) => void): string => {
    const dir = join(root, name);
    makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 1, out: dir });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    edit(config);
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return dir;
  };
  const off = qwen('qwen-window-off', (c) => Object.assign(c, { use_sliding_window: false, sliding_window: 8, max_window_layers: 1 }));
  buildModel({ source: off, out: `${off}-onnx` });
  assert.equal(buildSpec<{ slidingWindow?: unknown }>(`${off}-onnx`).slidingWindow, undefined);
  const on = qwen('qwen-window-on', (c) => Object.assign(c, { use_sliding_window: true, sliding_window: 8, max_window_layers: 1 }));
  buildModel({ source: on, out: `${on}-onnx` });
  assert.deepEqual(buildSpec<{ slidingWindow?: unknown }>(`${on}-onnx`).slidingWindow, { size: 8, layers: [false, true] });
  const typed = qwen('qwen-window-types', (c) => Object.assign(c, { use_sliding_window: true, sliding_window: 8, layer_types: ['sliding_attention', 'full_attention'] }));
  buildModel({ source: typed, out: `${typed}-onnx` });
  assert.deepEqual(buildSpec<{ slidingWindow?: unknown }>(`${typed}-onnx`).slidingWindow, { size: 8, layers: [true, false] });
  const bad = qwen('qwen-window-bad', (c) => Object.assign(c, { use_sliding_window: true, sliding_window: 8, layer_types: ['sliding_attention'] }));
  assert.throws(() => buildModel({ source: bad, out: `${bad}-onnx` }), { code: 'CHORUS_FILE_INVALID', param: 'layer_types' });
});
