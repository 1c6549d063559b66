import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { HfTokenizerAdapter, StreamDecoder, type Tokenizer } from '../../src/tokenizers/index.ts';
import { TOKENIZERS } from '../helpers/paths.ts';
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

/** Whether every prefix of the deltas of `ids` is a prefix of decode(ids), and all of them is decode(ids). */
/** Ids of `tokenizer`, `ordinary` ordinary ones to each special one, so both kinds of boundary are crossed. */
function mixedIds(tokenizer: Tokenizer, ordinary: number): fc.Arbitrary<number> {
  const special = [...tokenizer.specialTokens.all];
  return fc.oneof(
    { weight: ordinary, arbitrary: fc.integer({ min: 0, max: tokenizer.vocabSize - 1 }).filter((i) => !special.includes(i)) },
    { weight: 1, arbitrary: fc.constantFrom(...special) },
  );
}

function deltasMakeDecode(tokenizer: Tokenizer, ids: readonly number[], skip: boolean): boolean {
  const full = tokenizer.decode(ids, { skipSpecialTokens: skip });
  let joined = '';
  for (const delta of stream(tokenizer, ids, skip)) {
    joined += delta;
    if (!full.startsWith(joined)) return false;
  }
  return joined === full;
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
      const id = mixedIds(tokenizer, 9);
      fc.assert(
        fc.property(fc.array(id, { minLength: 1, maxLength: 40 }), fc.boolean(), (ids, skip) => deltasMakeDecode(tokenizer, ids, skip)),
        { seed: 20261122, numRuns: 1000 },
      );
    });
  }
});

describe('StreamDecoder over SentencePiece pieces', () => {
  for (const name of ['t5Spm', 'llamaSpm'] as const) {
    test(`${name}: chunks of any size after any context join to decode(context + ids) past the context`, () => {
      const tokenizer = t[name];
      const id = mixedIds(tokenizer, 18);
      fc.assert(
        fc.property(fc.array(id, { maxLength: 8 }), fc.array(fc.array(id, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 40 }), fc.boolean(), (context, chunks, skip) => {
          const decoder = new StreamDecoder(tokenizer, { context, skipSpecialTokens: skip });
          const text = chunks.map((chunk) => decoder.push(...chunk)).join('') + decoder.flush();
          const ids = chunks.flat();
          // What the ids add to the context's text, as push's own window does it: decode from a window of
          // the context's last 6 ids.
          const window = context.slice(-6);
          const before = tokenizer.decode(window, { skipSpecialTokens: skip });
          const after = tokenizer.decode([...window, ...ids], { skipSpecialTokens: skip });
          return window.length === 0 ? text === after : after.startsWith(before) ? text === after.slice(before.length) : true;
        }),
        { seed: 20261125, numRuns: 500 },
      );
    });

    test(`${name}: ordinary pieces after visible text are not decoded again one by one`, () => {
      let decodes = 0;
      const tokenizer = t[name];
      const counting: Tokenizer = Object.assign(Object.create(Object.getPrototypeOf(tokenizer) as object) as Tokenizer, tokenizer, {
        decode: (ids: readonly number[], options?: { skipSpecialTokens?: boolean }) => {
          decodes += 1;
          return tokenizer.decode(ids, options);
        },
      });
      const ids = tokenizer.encode(texts.find((text) => text.length > 400 && /^[\x20-\x7e\n]+$/.test(text))!, { addSpecialTokens: false });
      assert.ok(ids.length > 100);
      const decoder = new StreamDecoder(counting, { skipSpecialTokens: true });
      const text = ids.map((i) => decoder.push(i)).join('') + decoder.flush();
      assert.equal(text, tokenizer.decode(ids, { skipSpecialTokens: true }));
      assert.ok(decodes < ids.length / 4, `${decodes} decodes for ${ids.length} ids`);
    });
  }
});

describe('StreamDecoder over a byte-level tokenizer.json with added tokens', () => {
  // GPT-2's tokenizer.json with two added tokens, as Qwen's and Llama 3's files have them: one special,
  // one not (decode writes both as their text, the bytes before them decoded on their own).
  const json = JSON.parse(readFileSync(`${TOKENIZERS}/gpt2/tokenizer.json`, 'utf8')) as { added_tokens: object[]; model: { vocab: Record<string, number> } };
  json.added_tokens.push({ id: 50257, content: '<think>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  json.added_tokens.push({ id: 50258, content: '<|im_end|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  json.model.vocab['<think>'] = 50257;
  json.model.vocab['<|im_end|>'] = 50258;
  const tokenizer = new HfTokenizerAdapter(json);

  test('streams each id\'s bytes, added tokens as their text, as decode does', () => {
    assert.ok(tokenizer.tokenBytes !== undefined);
    assert.deepEqual([...tokenizer.tokenBytes(50257)], [...Buffer.from('<think>')]);
    const ids = tokenizer.encode('Hi<think> 東京 😀<|im_end|>done');
    assert.ok(ids.includes(50257) && ids.includes(50258), JSON.stringify(ids));
    for (const skip of [true, false]) assert.equal(stream(tokenizer, ids, skip).join(''), tokenizer.decode(ids, { skipSpecialTokens: skip }));
    // A character split by an added token: decode writes U+FFFD for its bytes before it, and so does the stream.
    const emoji = tokenizer.encode('😀');
    assert.ok(emoji.length > 1);
    const split = [emoji[0]!, 50257, ...emoji.slice(1)];
    for (const skip of [true, false]) assert.equal(stream(tokenizer, split, skip).join(''), tokenizer.decode(split, { skipSpecialTokens: skip }));
  });

  test('for any ids, every prefix of the deltas is a prefix of decode(ids), and all of them is decode(ids)', () => {
    const id = fc.oneof({ weight: 8, arbitrary: fc.integer({ min: 0, max: 50256 }) }, { weight: 1, arbitrary: fc.constantFrom(50256, 50257, 50258) });
    fc.assert(
      fc.property(fc.array(id, { minLength: 1, maxLength: 40 }), fc.boolean(), (ids, skip) => deltasMakeDecode(tokenizer, ids, skip)),
      { seed: 20261125, numRuns: 1000 },
    );
  });
});

describe('StreamDecoder edge cases', () => {
  test('a written special id starts a new run: the pieces after it stream as decode writes them', () => {
    // T5's SentencePiece drops a run's leading space-only pieces: "</s>", "▁", "▁bar" decode to "</s> bar".
    const ids = [1, 3, 1207];
    assert.equal(t.t5Spm.decode(ids), '</s> bar');
    assert.equal(stream(t.t5Spm, ids, false).join(''), '</s> bar');
  });

  test('a U+FEFF in the text streams as decode keeps it', () => {
    for (const tokenizer of [t.gpt2Json, t.gpt2Tiktoken]) {
      for (const text of ['Hi\uFEFFthere', '\uFEFFthere']) {
        const ids = tokenizer.encode(text);
        assert.equal(tokenizer.decode(ids), text);
        assert.equal(stream(tokenizer, ids, false).join(''), text);
      }
    }
  });

  test('a tokenizer.json whose special tokens are not the library\'s streams through decode', () => {
    // A pad token that is a plain token: decode keeps it where the stream's skip would drop it.
    const json = JSON.parse(readFileSync(`${TOKENIZERS}/gpt2/tokenizer.json`, 'utf8')) as object;
    const padded = new HfTokenizerAdapter(json, { config: { pad_token: '!' } });
    assert.equal(padded.tokenBytes, undefined);
    const ids = padded.encode('Hi! there');
    assert.equal(stream(padded, ids, true).join(''), padded.decode(ids, { skipSpecialTokens: true }));
  });
});
