import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { realTokenizers, type RealTokenizers } from '../helpers/tokenizers.ts';

let t: RealTokenizers;
before(async () => {
  t = await realTokenizers();
});

const T5_PROMPT = 'translate English to German: The house is wonderful.';

test('gpt2 encodes "Hello world" as 15496 995, through tokenizer.json and tiktoken', () => {
  assert.deepEqual(t.gpt2Json.encode('Hello world'), [15496, 995]);
  assert.deepEqual(t.gpt2Tiktoken.encode('Hello world'), [15496, 995]);
});

test('T5 tokenizer.json gives the ids FT\'s sample_request_single_t5.json starts with, EOS last', () => {
  assert.deepEqual(t.t5Json.encode(T5_PROMPT), [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1]);
});

test('T5 spiece.model gives the same ids without the final 1 unless EOS is asked for', () => {
  assert.deepEqual(t.t5Spm.encode(T5_PROMPT, { addSpecialTokens: false }), [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5]);
  assert.deepEqual(t.t5Spm.encode(T5_PROMPT), [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1]);
});

test('stories260K tok512.bin encodes "Once upon a time" with BOS as 1 403 407 261 378', () => {
  assert.deepEqual(t.storiesBin.encode('Once upon a time'), [1, 403, 407, 261, 378]);
  assert.equal(t.storiesBin.decode([1, 403, 407, 261, 378], { skipSpecialTokens: true }), 'Once upon a time');
  assert.equal(t.storiesBin.decode([1, 403, 407, 261, 378]), '<s>Once upon a time');
});

test('special-token ids and vocabulary sizes', () => {
  assert.deepEqual([t.gpt2Json.vocabSize, t.gpt2Json.specialTokens.eos], [50257, 50256]);
  assert.deepEqual([t.gpt2Tiktoken.vocabSize, t.gpt2Tiktoken.specialTokens.eos], [50257, 50256]);
  assert.deepEqual([t.t5Spm.vocabSize, t.t5Spm.specialTokens.eos, t.t5Spm.specialTokens.pad, t.t5Spm.specialTokens.unk, t.t5Spm.specialTokens.bos], [32000, 1, 0, 2, undefined]);
  assert.deepEqual([t.t5Json.vocabSize, t.t5Json.specialTokens.eos, t.t5Json.specialTokens.pad], [32100, 1, 0]);
  assert.deepEqual([t.llamaSpm.vocabSize, t.llamaSpm.specialTokens.bos, t.llamaSpm.specialTokens.eos, t.llamaSpm.specialTokens.unk], [32000, 1, 2, 0]);
  assert.deepEqual([t.storiesBin.vocabSize, t.storiesBin.specialTokens.bos], [512, 1]);
});

test('decode writes special tokens unless told to skip them', () => {
  assert.equal(t.gpt2Json.decode([15496, 50256]), 'Hello<|endoftext|>');
  assert.equal(t.gpt2Json.decode([15496, 50256], { skipSpecialTokens: true }), 'Hello');
  assert.equal(t.gpt2Tiktoken.decode([15496, 50256]), 'Hello<|endoftext|>');
  assert.equal(t.gpt2Tiktoken.decode([15496, 50256], { skipSpecialTokens: true }), 'Hello');
  const hello = t.llamaSpm.encode('Hello');
  assert.equal(t.llamaSpm.decode(hello), '<s> Hello');
  assert.equal(t.llamaSpm.decode(hello, { skipSpecialTokens: true }), 'Hello');
  assert.equal(t.t5Spm.decode(t.t5Spm.encode('Hello')), 'Hello</s>');
});

test('ids outside the vocabulary are refused with the index and the range', () => {
  for (const tokenizer of Object.values(t)) {
    assert.throws(() => tokenizer.decode([5, tokenizer.vocabSize]), (error: Error & { code?: string }) => {
      assert.equal(error.code, 'CHORUS_INVALID_ARGUMENT');
      assert.match(error.message, new RegExp(`^ids\\[1\\] must be a token id, an integer in \\[0, ${tokenizer.vocabSize - 1}\\], got ${tokenizer.vocabSize}$`));
      return true;
    });
    assert.throws(() => tokenizer.decode([-1]), /ids\[0\] must be a token id/);
    assert.throws(() => tokenizer.decode([1.5]), /ids\[0\] must be a token id/);
  }
});
