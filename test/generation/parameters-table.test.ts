import assert from 'node:assert/strict';
import { test } from 'node:test';
import { logitsProcessors, nextTopP, processLogits, sequenceState, validateSamplingParams, type SamplingParams } from '../../src/generation/core/index.ts';

// Every parameter the logits pipeline takes must change its output on fixed logits and a fixed history.
const LOGITS = Float32Array.from([3, 2.5, 2, 1, 0.5, -1]);
const END_ID = 5;

function processed(params: SamplingParams): number[] {
  const resolved = validateSamplingParams(params, LOGITS.length);
  const state = sequenceState([1], [2, 2, 3], resolved.runtime_top_p);
  return Array.from(processLogits(logitsProcessors(resolved, LOGITS.length, [END_ID]), LOGITS, state));
}

const TABLE: Array<[keyof SamplingParams, SamplingParams]> = [
  ['repetition_penalty', { repetition_penalty: 1.3 }],
  ['presence_penalty', { presence_penalty: 0.4 }],
  ['frequency_penalty', { frequency_penalty: 0.4 }],
  ['bad_words', { bad_words: [[3, 0]] }],
  ['min_length', { min_length: 5 }],
  ['temperature', { temperature: 0.5 }],
  ['runtime_top_k', { runtime_top_k: 2 }],
  ['runtime_top_p', { runtime_top_p: 0.5 }],
  ['end_id', { end_id: 4, min_length: 5 }],
];

for (const [field, params] of TABLE) {
  test(`${field} changes the processed logits`, () => {
    const base = field === 'end_id' ? processed({ min_length: 5 }) : processed({});
    assert.notDeepEqual(processed(params), base);
  });
}

test('top_p_decay, top_p_min and top_p_reset_ids change the next step\'s nucleus', () => {
  const params = validateSamplingParams({ runtime_top_p: 0.9, top_p_decay: 0.5, top_p_min: 0.3, top_p_reset_ids: [4] }, LOGITS.length);
  assert.equal(nextTopP(0.9, 0, params), 0.45);
  assert.equal(nextTopP(0.45, 0, params), 0.3);
  assert.equal(nextTopP(0.3, 4, params), 0.9);
});
