/** The server's intake pacing (src/server/intake.ts): one request a turn of the event loop, in order. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Observable, lastValueFrom, toArray } from 'rxjs';
import { intakeTurn, paced } from '../../src/server/intake.ts';

test('turns come one per turn of the event loop, in the order asked, with other work between them', async () => {
  const order: string[] = [];
  const turns = ['a', 'b', 'c'].map((name) => intakeTurn().then(() => order.push(name)));
  // Queued after the first turn: it runs in the same turn as 'a', before 'b' in the next.
  setImmediate(() => order.push('between'));
  await Promise.all(turns);
  assert.deepEqual(order, ['a', 'between', 'b', 'c']);
});

test('a paced stream subscribes at its turn, and not at all when it leaves before', async () => {
  let subscribed = 0;
  const source = new Observable<number>((subscriber) => {
    subscribed++;
    subscriber.next(1);
    subscriber.next(2);
    subscriber.complete();
  });
  const left = paced(() => source).subscribe();
  left.unsubscribe();
  assert.deepEqual(await lastValueFrom(paced(() => source).pipe(toArray())), [1, 2]);
  assert.equal(subscribed, 1);
});
