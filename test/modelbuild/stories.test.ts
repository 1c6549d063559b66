import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { buildModel } from '../../src/modelbuild/index.ts';
import { argmax, DecoderSession } from '../../src/runtime/index.ts';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';
import { Llama2cReference } from '../helpers/llama2c-run.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const out = scratchDir('chorus-stories-');
let fromBin: DecoderSession;
let fromHf: DecoderSession;

before(async () => {
  buildModel({ source: `${STORIES}/stories260K.bin`, out: join(out, 'bin') });
  buildModel({ source: `${STORIES}/hf`, out: join(out, 'hf') });
  fromBin = await DecoderSession.open(join(out, 'bin'));
  fromHf = await DecoderSession.open(join(out, 'hf'));
});
after(async () => {
  await fromBin.close();
  await fromHf.close();
});

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

test('stories260K built from stories260K.bin and from hf/ gives the same logits, prefill and cached decode', async () => {
  const prompt = [1, 403, 407, 261, 378];
  const a = await fromBin.run({ inputIds: [prompt] });
  const b = await fromHf.run({ inputIds: [prompt] });
  assert.ok(maxAbsDiff(a.logits, b.logits) <= 1e-5, `prefill diff ${maxAbsDiff(a.logits, b.logits)}`);
  const a2 = await fromBin.run({ inputIds: [[432]], cache: a.cache });
  const b2 = await fromHf.run({ inputIds: [[432]], cache: b.cache });
  assert.ok(maxAbsDiff(a2.logits, b2.logits) <= 1e-5, `decode diff ${maxAbsDiff(a2.logits, b2.logits)}`);
});

test('the built model computes what llama2.c\'s run.c computes, position by position', async () => {
  const reference = new Llama2cReference(`${STORIES}/stories260K.bin`);
  const prompt = [1, 403, 407, 261, 378, 432, 383, 286];
  const built = await fromBin.run({ inputIds: [prompt] });
  prompt.forEach((token, pos) => {
    const expected = reference.forward(token, pos);
    const actual = built.logits.subarray(pos * reference.vocab, (pos + 1) * reference.vocab);
    assert.ok(maxAbsDiff(actual, expected) <= 1e-4, `position ${pos}: diff ${maxAbsDiff(actual, expected)}`);
  });
});

test('greedy decoding from BOS gives run.c\'s first 60 ids and llama2.c\'s documented story', async () => {
  const reference = new Llama2cReference(`${STORIES}/stories260K.bin`);
  const expected: number[] = [];
  let token = 1;
  for (let pos = 0; pos < 60; pos++) {
    const logits = reference.forward(token, pos);
    token = argmax(Float32Array.from(logits), 0, reference.vocab);
    expected.push(token);
  }
  for (const session of [fromBin, fromHf]) assert.deepEqual(await session.greedy([1], 60), expected);
  const text = Llama2cTokenizer.load(join(out, 'bin', 'tokenizer.bin')).decode(expected, { skipSpecialTokens: true });
  assert.ok(text.startsWith('Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'), text);
});
