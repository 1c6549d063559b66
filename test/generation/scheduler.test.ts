import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Scheduler, type Schedulable } from '../../src/generation/core/index.ts';

const seq = (reservedTokens: number): Schedulable => ({ reservedTokens, cancelled: false, finished: false });
const limits = { maxBatchSize: 2, maxQueue: 3, kvTokenBudget: 100, contextLength: 60 };

test('schedule() admits in arrival order within the batch size and the cache budget', () => {
  const s = new Scheduler(limits);
  const [a, b, c] = [seq(50), seq(40), seq(30)];
  s.enqueue(a);
  s.enqueue(b);
  s.enqueue(c);
  assert.deepEqual(s.schedule().admitted, [a, b]);
  assert.deepEqual(s.schedule().admitted, []); // batch full
  assert.equal(s.nextFits(), false);
  b.finished = true;
  const next = s.schedule();
  assert.deepEqual([next.left, next.admitted], [[b], [c]]);
  assert.deepEqual(s.running, [a, c]);
});

test('the cache budget holds back a sequence that would not fit beside the running ones', () => {
  const s = new Scheduler({ ...limits, maxBatchSize: 4 });
  const [a, b] = [seq(60), seq(50)];
  s.enqueue(a);
  s.enqueue(b);
  assert.deepEqual(s.schedule().admitted, [a]);
  assert.equal(s.nextFits(), false); // 60 + 50 tokens
  a.cancelled = true;
  assert.deepEqual(s.schedule(), { admitted: [b], left: [a] });
});

test('enqueue() refuses what can never fit, and a full queue', () => {
  const s = new Scheduler(limits);
  assert.throws(() => s.enqueue(seq(61)), { code: 'CHORUS_CANNOT_FIT', message: /61 tokens, more than the 60 this model can hold/ });
  for (let i = 0; i < 3; i++) s.enqueue(seq(10));
  assert.throws(() => s.enqueue(seq(10)), { code: 'CHORUS_OVERLOADED' });
});

test('a cancelled waiting sequence leaves the queue without running', () => {
  const s = new Scheduler(limits);
  const a = seq(10);
  s.enqueue(a);
  a.cancelled = true;
  assert.deepEqual(s.schedule(), { admitted: [], left: [a] });
  assert.equal(s.waiting.length, 0);
});

test('a paged cache reserves whole blocks a row, and every block of the pool can be reserved', () => {
  // 9 blocks of 16: one sequence of exactly 144 tokens fits (a slack per row would have refused it).
  const s = new Scheduler({ maxBatchSize: 4, maxQueue: 8, kvTokenBudget: 144, contextLength: 144, blockSize: 16 });
  const whole = seq(144);
  s.enqueue(whole);
  assert.deepEqual(s.schedule().admitted, [whole]);
  assert.equal(s.reserved(), 144);
  whole.finished = true;
  s.schedule();
  // 17 tokens take 2 blocks (32); four such rows need 128 of the 144, a fifth would need 160.
  const rows = [seq(17), seq(17), seq(17), seq(17)];
  for (const r of rows) s.enqueue(r);
  assert.deepEqual(s.schedule().admitted, rows);
  assert.equal(s.reserved(), 128);
  // Beam search: each of its rows rounds up on its own (3 rows of 20 tokens: 3 x 32).
  const beams = { reservedTokens: 60, width: 3, cancelled: false, finished: false };
  const t = new Scheduler({ maxBatchSize: 4, maxQueue: 8, kvTokenBudget: 80, contextLength: 144, blockSize: 16 });
  assert.throws(() => t.enqueue(beams), { code: 'CHORUS_CANNOT_FIT', message: /20 tokens \(times beam_width 3: 96 in the cache\), more than the 16 this model can hold/ });
});
