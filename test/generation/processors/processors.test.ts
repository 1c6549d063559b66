import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { badWords, frequencyPenalty, minLength, presencePenalty, repetitionPenalty, temperature, topK, topP, sequenceState } from '../../../src/generation/core/index.ts';

const logits = (...values: number[]): Float32Array => Float32Array.from(values);
const list = (values: Float32Array): number[] => Array.from(values);

describe('logits processors on hand-made logits', () => {
  test('repetitionPenalty() divides positive and multiplies negative logits of prompt and output ids', () => {
    const out = repetitionPenalty(2)!(logits(4, -4, 4, 1), sequenceState([0], [1]));
    assert.deepEqual(list(out), [2, -8, 4, 1]);
    assert.equal(repetitionPenalty(1), undefined);
    assert.throws(() => repetitionPenalty(0), { message: 'repetition_penalty must be a number in (0, inf), got 0' });
  });

  test('presencePenalty() subtracts once per distinct output id; the prompt does not count', () => {
    assert.deepEqual(list(presencePenalty(0.5)!(logits(1, 1, 1), sequenceState([2], [0, 0, 1]))), [0.5, 0.5, 1]);
  });

  test('frequencyPenalty() subtracts once per occurrence in the output', () => {
    assert.deepEqual(list(frequencyPenalty(0.5)!(logits(1, 1, 1), sequenceState([2], [0, 0, 1]))), [0, 0.5, 1]);
    assert.throws(() => frequencyPenalty(Number.NaN), /frequency_penalty must be a finite number/);
  });

  test('badWords() bans a phrase\'s last id only where the output ends with the rest of it', () => {
    const ban = badWords([[3], [1, 2]])!;
    assert.deepEqual(list(ban(logits(0, 0, 0, 0), sequenceState([], [0]))), [0, 0, 0, -Infinity]);
    assert.deepEqual(list(ban(logits(0, 0, 0, 0), sequenceState([], [0, 1]))), [0, 0, -Infinity, -Infinity]);
  });

  test('minLength() forbids the end id until the output is long enough', () => {
    const min = minLength(2, [3])!;
    assert.deepEqual(list(min(logits(0, 0, 0, 5), sequenceState([], [1]))), [0, 0, 0, -Infinity]);
    assert.deepEqual(list(min(logits(0, 0, 0, 5), sequenceState([], [1, 2]))), [0, 0, 0, 5]);
  });

  test('temperature() divides by t; 0 and 1 need no processor; a negative t is refused', () => {
    assert.deepEqual(list(temperature(2)!(logits(2, -4), sequenceState([]))), [1, -2]);
    assert.equal(temperature(0), undefined);
    assert.throws(() => temperature(-1), { message: 'temperature must be a number in [0, inf), got -1' });
  });

  test('topK() keeps the k largest and ties with the k-th', () => {
    assert.deepEqual(list(topK(2, 5)!(logits(1, 5, 3, 3, 0), sequenceState([]))), [-Infinity, 5, 3, 3, -Infinity]);
    assert.equal(topK(0, 5), undefined);
  });

  test('topP() keeps the most likely ids until their probability reaches p, the crossing id included', () => {
    // softmax of ln(0.5), ln(0.3), ln(0.2) is 0.5, 0.3, 0.2
    const l = logits(Math.log(0.5), Math.log(0.3), Math.log(0.2));
    const kept = (p: number): boolean[] => list(topP(p, false)!(l, sequenceState([], [], p))).map((v) => v !== -Infinity);
    assert.deepEqual(kept(0.5), [true, false, false]);
    assert.deepEqual(kept(0.6), [true, true, false]);
    assert.deepEqual(kept(0.95), [true, true, true]);
    assert.deepEqual(kept(1e-9), [true, false, false]);
  });
});
