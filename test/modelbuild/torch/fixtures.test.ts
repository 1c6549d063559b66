/**
 * The checkpoints torch itself wrote (test/fixtures/make/checkpoints.py, run with torch and
 * transformers): each must build to exactly the ONNX weights its safetensors twin builds to.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ChorusError } from '../../../src/errors.ts';
import { buildModel, checkpointKind, type BuildDtype } from '../../../src/modelbuild/index.ts';
import { readStateDict } from '../../../src/modelbuild/torch/state-dict.ts';
import { DecoderSession } from '../../../src/runtime/index.ts';
import { builtWeights } from '../../helpers/onnx-weights.ts';
import { scratchDir } from '../../helpers/scratch.ts';

const FIXTURES = new URL('../../fixtures/checkpoints/', import.meta.url).pathname;
const root = scratchDir('chorus-torch-fixtures-');
const built = new Map<string, string>();

/** The build of fixture `source` (a path under the fixtures), made once per dtype. */
function build(source: string, dtype: BuildDtype = 'fp32'): string {
  const key = `${source}@${dtype}`;
  let out = built.get(key);
  if (out === undefined) {
    out = join(root, key.replace(/[/@.]/g, '_'));
    buildModel({ source: join(FIXTURES, source), out, dtype });
    built.set(key, out);
  }
  return out;
}

/** Asserts the two builds wrote the same initializers, byte for byte. */
function sameWeights(source: string, twin: string, dtype: BuildDtype = 'fp32'): void {
  const a = builtWeights(build(source, dtype));
  const b = builtWeights(build(twin, dtype));
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort(), source);
  assert.ok(a.size > 20, `${source}: only ${a.size} initializers`);
  for (const [name, weight] of b) assert.deepEqual(a.get(name), weight, `${source} (${dtype}): initializer ${name} differs from ${twin}'s`);
}

test('the fixtures were written by torch and transformers', () => {
  const manifest = JSON.parse(readFileSync(join(FIXTURES, 'manifest.json'), 'utf8')) as { torch: string; transformers: string; max_abs_logit_difference: Record<string, number> };
  assert.match(manifest.torch, /^\d+\.\d+/);
  assert.match(manifest.transformers, /^\d+\.\d+/);
  assert.deepEqual(Object.keys(manifest.max_abs_logit_difference).sort(), ['megatron v0', 'megatron v1', 'megatron v3']);
});

test('pytorch_model.bin (one file, tied head stored twice) builds the weights of its safetensors twin, in fp32 and fp16', () => {
  assert.equal(checkpointKind(join(FIXTURES, 'gpt2/bin')), 'hf');
  sameWeights('gpt2/bin', 'gpt2/hf');
  sameWeights('gpt2/bin', 'gpt2/hf', 'fp16');
});

test('sharded pytorch_model-0000N-of-00002.bin with its index (float16) builds the weights of its twin', () => {
  sameWeights('llama/bin', 'llama/hf');
});

test('a bfloat16 .pt state dict of views (offsets, a transposed stride, an nn.Parameter), bare or under "model", builds its twin', () => {
  assert.equal(checkpointKind(join(FIXTURES, 'pt/model.pt')), 'torch-file');
  sameWeights('pt/model.pt', 'pt/hf');
  sameWeights('pt/wrapped.pt', 'pt/hf');
});

test('the format torch.save wrote before PyTorch 1.6 builds too', () => {
  sameWeights('legacy', 'gpt2/hf');
});

test('Megatron-LM GPT over 2 tensor-parallel ranks, in the layouts of checkpoint_version 0, 1 and 3, builds its merged GPT-2 twin', () => {
  for (const version of ['v0', 'v1', 'v3']) {
    assert.equal(checkpointKind(join(FIXTURES, 'megatron', version)), 'megatron');
    sameWeights(`megatron/${version}`, 'megatron/hf');
  }
  sameWeights('megatron/v3', 'megatron/hf', 'fp16');
});

test('.nemo GPT archives (a plain tar over 2 ranks, a tar.gz of one) build the merged GPT-2 twin', () => {
  sameWeights('nemo/gpt-tp2.nemo', 'megatron/hf');
  sameWeights('nemo/gpt-tp1.nemo', 'megatron/hf');
});

test('a merged Megatron build generates the logits of its twin', async () => {
  const [a, b] = [await DecoderSession.open(build('megatron/v3')), await DecoderSession.open(build('megatron/hf'))];
  try {
    const step = { inputIds: [[3, 141, 59, 26, 53, 58]] };
    assert.deepEqual((await a.run(step)).logits, (await b.run(step)).logits);
  } finally {
    await a.close();
    await b.close();
  }
});

test('a pickle naming os.system or eval is refused with that name, by the reader and by a build', () => {
  for (const [dir, name] of [
    ['forbidden/system', 'posix.system'],
    ['forbidden/eval', '__builtin__.eval'],
  ] as const) {
    const file = join(FIXTURES, dir, 'pytorch_model.bin');
    assert.throws(() => readStateDict(file), (error: unknown) => error instanceof ChorusError && error.value === name && error.message.includes(`refused: its pickle names ${name}`));
    assert.throws(() => buildModel({ source: join(FIXTURES, dir), out: join(root, dir.replace('/', '_')) }), new RegExp(`refused: its pickle names ${name.replace(/\./g, '\\.')}`));
  }
});
