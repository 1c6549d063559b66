import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { DecoderSession, type DecoderStep } from '../../src/runtime/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-flavors-');

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

/** Prefill a left-padded batch, then one cached decode step, in both flavors; the largest logit difference. */
async function flavorDiff(source: string, name: string): Promise<number> {
  buildModel({ source, out: join(root, `${name}-portable`), flavor: 'portable' });
  buildModel({ source, out: join(root, `${name}-cuda`), flavor: 'cuda' });
  const portable = await DecoderSession.open(join(root, `${name}-portable`));
  const cuda = await DecoderSession.open(join(root, `${name}-cuda`)); // contrib operators have CPU kernels too
  const prefill: DecoderStep = { inputIds: [[0, 0, 5, 17, 99, 200], [8, 9, 10, 11, 12, 13]], attentionMask: [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]] };
  const [a, b] = [await portable.run(prefill), await cuda.run(prefill)];
  const V = portable.vocabSize;
  // The two padding positions of row 0 attend to nothing real; only real tokens' logits are compared.
  let diff = maxAbsDiff(a.logits.subarray(2 * V), b.logits.subarray(2 * V));
  const decode = { inputIds: [[1], [2]], attentionMask: [[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]] };
  diff = Math.max(diff, maxAbsDiff((await portable.run({ ...decode, cache: a.cache })).logits, (await cuda.run({ ...decode, cache: b.cache })).logits));
  await portable.close();
  await cuda.close();
  return diff;
}

for (const arch of ['gpt2', 'llama', 'qwen2', 'llama3', 'qwen3', 'phi3'] as const) {
  test(`the portable and cuda flavors of a tiny ${arch} agree within 1e-4 (fp32)`, async () => {
    const checkpoint = join(root, arch);
    makeCheckpoint({ arch, size: 'tiny', seed: 5, out: checkpoint });
    const diff = await flavorDiff(checkpoint, arch);
    assert.ok(diff <= 1e-4, `max |diff| ${diff}`);
  });
}

test('the portable and cuda flavors of stories260K agree within 1e-4 (fp32)', async () => {
  const diff = await flavorDiff(`${STORIES}/stories260K.bin`, 'stories');
  assert.ok(diff <= 1e-4, `max |diff| ${diff}`);
});
