import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { parseWordCsv, toWordList } from '../../src/tokenizers/index.ts';
import { realTokenizers, type RealTokenizers } from '../helpers/tokenizers.ts';

let t: RealTokenizers;
before(async () => {
  t = await realTokenizers();
});

test('parseWordCsv() splits FT\'s CSV strings as Python\'s csv module does', () => {
  assert.deepEqual(parseWordCsv('Hawks, Hawks'), ['Hawks', ' Hawks']);
  assert.deepEqual(parseWordCsv('"a, b",c'), ['a, b', 'c']);
  assert.deepEqual(parseWordCsv('say "hi"'), ['say "hi"']);
  assert.deepEqual(parseWordCsv(''), []);
});

test('toWordList() builds [batch, 2, L]: flat ids, cumulative end offsets, padded with 0 and -1', () => {
  const hawks = t.gpt2Json.encode('Hawks');
  const spaceHawks = t.gpt2Json.encode(' Hawks');
  const dot = t.gpt2Json.encode('.');
  const list = toWordList(t.gpt2Json, ['Hawks, Hawks', '.', '']);
  const width = hawks.length + spaceHawks.length;
  assert.deepEqual(list.dims, [3, 2, width]);
  const rows = Array.from({ length: 6 }, (_, r) => Array.from(list.data.subarray(r * width, (r + 1) * width)));
  assert.deepEqual(rows, [
    [...hawks, ...spaceHawks],
    [hawks.length, hawks.length + spaceHawks.length, ...Array(width - 2).fill(-1)],
    [...dot, ...Array(width - dot.length).fill(0)],
    [dot.length, ...Array(width - 1).fill(-1)],
    Array(width).fill(0),
    Array(width).fill(-1),
  ]);
  // The ids are tokenized without special tokens: T5 would otherwise append </s> to each phrase.
  const t5 = toWordList(t.t5Spm, ['house']);
  assert.deepEqual(Array.from(t5.data), [...t.t5Spm.encode('house', { addSpecialTokens: false }), 1]);
});

test('toWordList() of no phrases at all is [batch, 2, 1] of 0 and -1', () => {
  const list = toWordList(t.gpt2Json, ['', '']);
  assert.deepEqual(list.dims, [2, 2, 1]);
  assert.deepEqual(Array.from(list.data), [0, -1, 0, -1]);
});
