import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fitWords, syntheticText } from '../../src/bench/index.ts';

/** A server's count: `perWord` tokens a word and a BOS, every text it was asked about kept. */
function counter(perWord: number): { measure: (text: string) => Promise<number>; asked: number[] } {
  const asked: number[] = [];
  return {
    asked,
    measure: async (text: string) => {
      const count = 1 + perWord * (text === '' ? 0 : text.split(' ').length);
      asked.push(count);
      return count;
    },
  };
}

test('fitWords finds the words for a token count from a sample, never asking about a text far past it', async () => {
  const words = syntheticText(2000, 0).split(' ');
  for (const perWord of [1, 3, 5]) {
    const { measure, asked } = counter(perWord);
    const fit = await fitWords(words, 100, measure);
    assert.ok(Math.abs(fit.measured! - 100) <= perWord, `${perWord} a word: ${fit.measured}`);
    assert.equal(fit.measured, 1 + perWord * fit.words);
    // A small model's context (256, say) holds every text asked about on the way to 100 tokens.
    assert.ok(Math.max(...asked) <= 120, `${perWord} a word: asked about ${asked.join(', ')}`);
  }
});

test('fitWords without counts from the server assumes 0.75 words a token', async () => {
  const fit = await fitWords(syntheticText(500, 0).split(' '), 100, async () => undefined);
  assert.deepEqual(fit, { words: 75, measured: undefined });
});
