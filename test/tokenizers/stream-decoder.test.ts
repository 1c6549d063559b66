import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import fc from 'fast-check';
import { StreamDecoder, type Tokenizer } from '../../src/tokenizers/index.ts';
import { corpus } from '../helpers/corpus.ts';
import { realTokenizers, type RealTokenizers } from '../helpers/tokenizers.ts';

let t: RealTokenizers;
before(async () => {
  t = await realTokenizers();
});

/** Streams `ids` one at a time; returns the deltas (the flush last). */
function stream(tokenizer: Tokenizer, ids: readonly number[], skipSpecialTokens: boolean): string[] {
  const decoder = new StreamDecoder(tokenizer, { skipSpecialTokens });
  const deltas = ids.map((id) => decoder.push(id));
  deltas.push(decoder.flush());
  return deltas;
}

const texts = corpus();

describe('StreamDecoder over the corpus', () => {
  for (const name of ['gpt2Json', 'gpt2Tiktoken', 't5Json', 't5Spm', 'llamaSpm', 'llamaBin', 'storiesBin'] as const) {
    test(`${name}: deltas join to decode(ids), and none holds a U+FFFD`, () => {
      const tokenizer = t[name];
      for (const text of texts) {
        const ids = tokenizer.encode(text);
        for (const skip of [true, false]) {
          const deltas = stream(tokenizer, ids, skip);
          assert.equal(deltas.join(''), tokenizer.decode(ids, { skipSpecialTokens: skip }), JSON.stringify(text.slice(0, 60)));
          // Corpus text is valid Unicode, so a U+FFFD in a delta could only be a split character.
          if (!text.includes('\uFFFD')) assert.ok(!deltas.some((d) => d.includes('\uFFFD')), JSON.stringify(text.slice(0, 60)));
        }
      }
    });
  }

  test('the streamed text keeps SentencePiece\'s spaces: the first piece loses its space, later ones keep it', () => {
    const ids = t.llamaSpm.encode('Once upon a time', { addSpecialTokens: false });
    assert.deepEqual(stream(t.llamaSpm, ids, true), ['Once', ' upon', ' a', ' time', '']);
  });

  test('a CJK character split over byte tokens arrives whole', () => {
    const ids = t.gpt2Json.encode('你好');
    assert.ok(ids.length > 2, 'the characters span several byte-level tokens');
    const deltas = stream(t.gpt2Json, ids, false).filter((d) => d !== '');
    assert.deepEqual(deltas, ['你', '好']);
  });

  test('context ids make the first streamed piece keep its leading space', () => {
    const prompt = t.llamaSpm.encode('Tell me a story.', { addSpecialTokens: false });
    const continuation = t.llamaSpm.encode('Tell me a story. Once upon', { addSpecialTokens: false }).slice(prompt.length);
    const decoder = new StreamDecoder(t.llamaSpm, { context: prompt });
    const text = continuation.map((id) => decoder.push(id)).join('') + decoder.flush();
    assert.equal(text, ' Once upon');
  });
});

describe('StreamDecoder property: 1,000 random id sequences per adapter', () => {
  for (const name of ['gpt2Json', 'gpt2Tiktoken', 't5Json', 't5Spm', 'llamaSpm', 'llamaBin', 'storiesBin'] as const) {
    test(`${name}: for any ids, every prefix of the deltas is a prefix of decode(ids), and all of them is decode(ids)`, () => {
      const tokenizer = t[name];
      const special = [...tokenizer.specialTokens.all];
      // Mostly ordinary ids, some special ones, so both kinds of boundary are crossed.
      const id = fc.oneof(
        { weight: 9, arbitrary: fc.integer({ min: 0, max: tokenizer.vocabSize - 1 }).filter((i) => !special.includes(i)) },
        { weight: 1, arbitrary: fc.constantFrom(...special) },
      );
      fc.assert(
        fc.property(fc.array(id, { minLength: 1, maxLength: 40 }), fc.boolean(), (ids, skip) => {
          const deltas = stream(tokenizer, ids, skip);
          const full = tokenizer.decode(ids, { skipSpecialTokens: skip });
          let joined = '';
          for (const delta of deltas) {
            joined += delta;
            if (!full.startsWith(joined)) return false;
          }
          return joined === full;
        }),
        { seed: 20261122, numRuns: 1000 },
      );
    });
  }
});
