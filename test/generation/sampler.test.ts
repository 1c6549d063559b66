import assert from 'node:assert/strict';
import { test } from 'node:test';
import { greedy, logitsProcessors, processLogits, sample, sequenceState, validateSamplingParams } from '../../src/generation/core/index.ts';
import { uniformStream } from '../../src/util/random.ts';

const LOGITS = Float32Array.from([2.0, 1.5, 1.2, 0.3, -0.5, -1.0, 0.9, 1.9]);

/** Draws `n` tokens with the processors of `params` from fixed logits. */
function draws(params: object, n: number, seed: number): number[] {
  const resolved = validateSamplingParams({ ...params, random_seed: seed }, LOGITS.length);
  const processors = logitsProcessors(resolved, LOGITS.length, []);
  const next = uniformStream(resolved.random_seed);
  const processed = processLogits(processors, LOGITS, sequenceState([], [], resolved.runtime_top_p));
  return Array.from({ length: n }, () => (resolved.temperature === 0 ? greedy(processed).token : sample(processed, next()).token));
}

test('greedy() takes the largest logit and reports its log-probability', () => {
  const choice = greedy(LOGITS);
  assert.equal(choice.token, 0);
  const logSum = Math.log(Array.from(LOGITS).reduce((a, v) => a + Math.exp(v), 0));
  assert.ok(Math.abs(choice.logProb - (2.0 - logSum)) < 1e-6);
});

test('top_k = 1, top_p -> 0 and temperature = 0 each reduce sampling to greedy', () => {
  for (const params of [{ runtime_top_k: 1 }, { runtime_top_p: 1e-9 }, { temperature: 0 }]) {
    assert.deepEqual(new Set(draws(params, 200, 7)), new Set([0]), JSON.stringify(params));
  }
});

test('a seed gives the same draws every time; another seed gives others', () => {
  assert.deepEqual(draws({}, 50, 42), draws({}, 50, 42));
  assert.notDeepEqual(draws({}, 50, 42), draws({}, 50, 43));
});

test('10,000 draws with top_k = 5 and top_p = 0.8 match the filtered distribution (chi-square, p > 0.001)', () => {
  const n = 10_000;
  const counts = new Map<number, number>();
  for (const token of draws({ runtime_top_k: 5, runtime_top_p: 0.8 }, n, 2026)) counts.set(token, (counts.get(token) ?? 0) + 1);
  // Expected, worked out independently: the 5 largest logits are ids 0, 7, 1, 2, 6; renormalised over
  // them, the smallest prefix in descending order whose probability reaches 0.8 is kept.
  const top5 = [0, 7, 1, 2, 6];
  const weights = top5.map((id) => Math.exp(LOGITS[id]!));
  const total5 = weights.reduce((a, b) => a + b);
  const kept: number[] = [];
  let cumulative = 0;
  for (let i = 0; i < top5.length && cumulative < 0.8; i++) {
    kept.push(top5[i]!);
    cumulative += weights[i]! / total5;
  }
  const keptTotal = kept.reduce((a, id) => a + Math.exp(LOGITS[id]!), 0);
  assert.deepEqual([...counts.keys()].sort(), [...kept].sort(), 'only the kept ids are ever drawn');
  let chiSquare = 0;
  for (const id of kept) {
    const expected = (n * Math.exp(LOGITS[id]!)) / keptTotal;
    chiSquare += (counts.get(id)! - expected) ** 2 / expected;
  }
  // The 0.999 quantile of the chi-square distribution with (kept - 1) degrees of freedom (standard tables).
  const quantile999: Record<number, number> = { 1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467 };
  assert.ok(chiSquare < quantile999[kept.length - 1]!, `chi-square ${chiSquare.toFixed(2)} with ${kept.length - 1} degrees of freedom`);
});
