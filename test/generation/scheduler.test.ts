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
