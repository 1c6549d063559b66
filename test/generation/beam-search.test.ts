import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BeamSearch } from '../../src/generation/core/beam-search.ts';
import { validateSamplingParams, type SamplingParams } from '../../src/generation/index.ts';

// A toy model over 6 ids: what comes next depends only on the last token. 5 is the end id.
const V = 6;
const END = 5;
const probs: Record<string, number[]> = {
  start: [0.5, 0.4, 0.1, 0, 0, 0],
  // After 0 the model is unsure; after 1 it is sure of 2 or 3: greedy takes 0, beams take 1.
  0: [0.2, 0.2, 0.2, 0.2, 0.1, 0.1],
  1: [0, 0, 0.45, 0.5, 0.02, 0.03],
  2: [0.1, 0.1, 0.1, 0.1, 0.1, 0.5],
  3: [0.1, 0.1, 0.1, 0.1, 0.3, 0.3],
  4: [0.3, 0.1, 0.1, 0.1, 0.1, 0.3],
};

function logits(tokens: readonly number[]): Float32Array {
  const p = probs[tokens.length === 0 ? 'start' : String(tokens[tokens.length - 1])]!;
  return Float32Array.from(p, (x) => (x === 0 ? -Infinity : Math.log(x)));
}

/** Runs a search to the end, tracking each row's tokens the way an engine tracks its cache rows. */
function search(params: SamplingParams, endIds: readonly number[] = [END]): { search: BeamSearch; firstParents: number[][] } {
  const resolved = validateSamplingParams({ request_output_len: 6, ...params }, V);
  const beam = new BeamSearch([0], resolved, endIds);
  let rows: number[][] = [[]];
  const firstParents: number[][] = [];
  while (!beam.done) {
    const parents = beam.step((b) => logits(rows[Math.min(b, rows.length - 1)]!));
    const last = beam.lastTokens();
    rows = parents.map((p, i) => [...rows[p]!, last[i]!]);
    firstParents.push(parents);
  }
  return { search: beam, firstParents };
}

test('two beams find the likelier sequence that greedy decoding misses', () => {
  const best = search({ beam_width: 2, num_return_sequences: 1 }).search.results()[0]!;
  assert.equal(best.tokens[0], 1);
  // Greedy takes 0 first (0.5 > 0.4); two tokens on, the beams' 1 -> 3 has 0.2 against 0.5 * 0.2 = 0.1.
  const greedyFirst = probs.start!.indexOf(Math.max(...probs.start!));
  assert.equal(greedyFirst, 0);
});

test('with several end ids a hypothesis ends at whichever comes first', () => {
  const params = { beam_width: 3, num_return_sequences: 3 };
  // With 5 alone, 4 is an ordinary token that hypotheses go on from.
  assert.ok(search(params).search.results().some((h) => h.tokens.slice(0, -1).includes(4)));
  const results = search(params, [4, END]).search.results();
  assert.ok(results.some((h) => h.tokens.at(-1) === 4) && results.some((h) => h.tokens.at(-1) === END));
  for (const h of results) assert.ok(!h.tokens.slice(0, -1).some((t) => t === 4 || t === END), h.tokens.join(','));
});

test('results are ranked by score, cumLogProb sums the token log-probs, and score divides by length^len_penalty', () => {
  for (const lp of [1, 2, 0, -0.5]) {
    const results = search({ beam_width: 3, num_return_sequences: 3, len_penalty: lp }).search.results();
    assert.equal(results.length, 3);
    for (let i = 1; i < results.length; i++) assert.ok(results[i - 1]!.score >= results[i]!.score);
    for (const h of results) {
      const sum = h.logProbs.reduce((a, b) => a + b, 0);
      assert.ok(Math.abs(h.cumLogProb - sum) < 1e-5);
      assert.ok(Math.abs(h.score - h.cumLogProb / h.tokens.length ** lp) < 1e-5);
    }
  }
});

test('len_penalty moves the ranking between short and long hypotheses', () => {
  const lengths = (lp: number): number[] => search({ beam_width: 4, num_return_sequences: 4, len_penalty: lp, early_stopping: 'never' }).search.results().map((h) => h.tokens.length);
  const short = lengths(-2);
  const long = lengths(3);
  assert.notDeepEqual(short, long);
  assert.ok(long[0]! > short[0]!, `best length with len_penalty 3 (${long[0]}) should exceed that with -2 (${short[0]})`);
});

test('beam_search_diversity_rate spreads the next beams over more parents', () => {
  // Step 2 from beams [0] and [1]: [1] has the two best continuations (1 -> 3: 0.2, 1 -> 2: 0.18), so
  // without diversity both next beams descend from it; with a rate its second child loses to [0]'s best (0.1).
  const plain = search({ beam_width: 2, num_return_sequences: 2 }).firstParents[1]!;
  const diverse = search({ beam_width: 2, num_return_sequences: 2, beam_search_diversity_rate: 3 }).firstParents[1]!;
  assert.equal(new Set(plain).size, 1);
  assert.equal(new Set(diverse).size, 2);
});

test('early_stopping true ends as soon as beam_width hypotheses are finished; false and never search on', () => {
  const steps = (early: boolean | 'never'): number => search({ beam_width: 2, num_return_sequences: 2, early_stopping: early, len_penalty: 2 }).firstParents.length;
  assert.ok(steps(true) <= steps(false));
  assert.ok(steps(false) <= steps('never'));
  assert.ok(steps(true) < steps('never'));
});

test('stop words end a hypothesis with finish reason stop; the length limit with length', () => {
  const results = search({ beam_width: 2, num_return_sequences: 2, stop_words: [[1, 3]] }).search.results();
  const stopped = results.find((h) => h.finishReason === 'stop');
  assert.ok(stopped);
  assert.deepEqual(stopped.tokens.slice(-2), [1, 3]);
  const lengthOnly = search({ beam_width: 2, end_id: 4, min_length: 6 }).search.results()[0]!;
  assert.equal(lengthOnly.finishReason, 'length');
  assert.equal(lengthOnly.tokens.length, 6);
});
