import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { corpus } from '../helpers/corpus.ts';
import { realTokenizers, type RealTokenizers } from '../helpers/tokenizers.ts';

const texts = corpus();
let t: RealTokenizers;
before(async () => {
  t = await realTokenizers();
});

/** The strings where `decode(encode(s)) !== expected(s)`, for one message listing them all. */
function roundTripFailures(encode: (s: string) => number[], decode: (ids: number[]) => string, expected = (s: string) => s): string[] {
  return texts.filter((s) => decode(encode(s)) !== expected(s)).map((s) => JSON.stringify(s.slice(0, 80)));
}

describe('round trips over the corpus', () => {
  test('the corpus has at least 300 strings', () => {
    assert.ok(texts.length >= 300, `${texts.length} strings`);
  });

  test('GPT-2 tokenizer.json: decode(encode(s)) == s', () => {
    assert.deepEqual(roundTripFailures((s) => t.gpt2Json.encode(s), (ids) => t.gpt2Json.decode(ids)), []);
  });

  test('GPT-2 through tiktoken: decode(encode(s)) == s, and the ids equal tokenizer.json\'s', () => {
    assert.deepEqual(roundTripFailures((s) => t.gpt2Tiktoken.encode(s), (ids) => t.gpt2Tiktoken.decode(ids)), []);
    const differing = texts.filter((s) => t.gpt2Tiktoken.encode(s).join(' ') !== t.gpt2Json.encode(s).join(' '));
    assert.deepEqual(differing, []);
  });

  test('Llama 2 through SentencePiece: decode(encode(s)) == s, special tokens skipped', () => {
    assert.deepEqual(roundTripFailures((s) => t.llamaSpm.encode(s), (ids) => t.llamaSpm.decode(ids, { skipSpecialTokens: true })), []);
    assert.deepEqual(roundTripFailures((s) => t.llamaSpm.encode(s, { addSpecialTokens: false }), (ids) => t.llamaSpm.decode(ids)), []);
  });

  test('Llama 2 through its llama2.c tokenizer.bin: the same ids as SentencePiece, and the round trip', () => {
    const differing = texts.filter((s) => t.llamaBin.encode(s).join(' ') !== t.llamaSpm.encode(s).join(' '));
    assert.deepEqual(differing, []);
    assert.deepEqual(roundTripFailures((s) => t.llamaBin.encode(s), (ids) => t.llamaBin.decode(ids, { skipSpecialTokens: true })), []);
  });

  test('stories260K tok512.bin: decode(encode(s)) == s', () => {
    assert.deepEqual(roundTripFailures((s) => t.storiesBin.encode(s), (ids) => t.storiesBin.decode(ids, { skipSpecialTokens: true })), []);
  });

  /**
   * T5's normalization (the nmt_nfkc charsmap in spiece.model, with remove_extra_whitespaces): NFKC,
   * U+200B (zero-width space) becomes a space, runs of whitespace become one space, and leading and
   * trailing whitespace goes. Characters outside T5's vocabulary become <unk>, so strings holding any
   * are left out of the comparison.
   */
  const t5Normalize = (s: string): string => s.normalize('NFKC').replace(/\u200b/gu, ' ').replace(/\s+/gu, ' ').trim();

  test('T5 (spiece.model and tokenizer.json): decode(encode(s)) == T5-normalized s', () => {
    const unk = t.t5Spm.specialTokens.unk!;
    const comparable = texts.filter((s) => !t.t5Spm.encode(s).includes(unk));
    assert.ok(comparable.length >= 300, `${comparable.length} strings without <unk>`);
    for (const tokenizer of [t.t5Spm, t.t5Json]) {
      const failures = comparable.filter((s) => tokenizer.decode(tokenizer.encode(s), { skipSpecialTokens: true }) !== t5Normalize(s));
      assert.deepEqual(failures, [], tokenizer.kind);
    }
  });

  test('T5: tokenizer.json gives the same ids as spiece.model for every string', () => {
    const differing = texts.filter((s) => t.t5Json.encode(s).join(' ') !== t.t5Spm.encode(s).join(' '));
    assert.deepEqual(differing, []);
  });
});
