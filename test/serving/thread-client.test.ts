/**
 * The engine client across a MessagePort (what `chorus serve --http-threads` runs its HTTP threads on):
 * every answer the same as the hosted client's, errors with their code and field, cancellation reaching
 * the host, model control visible at once, and streams failed with CHORUS_CLOSED when the host stops.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MessageChannel } from 'node:worker_threads';
import { firstValueFrom, lastValueFrom, map, take, toArray } from 'rxjs';
import { ChorusError } from '../../src/errors.ts';
import { ClientSnapshots, hostClient, ThreadClient } from '../../src/serving/index.ts';
import { FakeEngineClient } from '../helpers/fake-client.ts';

async function pair(fake: FakeEngineClient) {
  const snapshots = new ClientSnapshots(fake);
  const { port1, port2 } = new MessageChannel();
  const hosted = hostClient(fake, port1, snapshots);
  const client = await ThreadClient.connect(port2);
  return {
    hosted,
    client,
    snapshots,
    close: () => {
      hosted.close();
      snapshots.close();
    },
  };
}

const fakeOptions = {
  pipelines: ['chat', 'echo'],
  models: ['llm'],
  randomWeights: ['echo'],
  ensembles: [{ name: 'sum', inputs: [{ name: 'x', datatype: 'INT64' as const, shape: [-1], optional: false }], outputs: [{ name: 'y', datatype: 'INT64' as const, shape: [-1], optional: false }] }],
  words: (request: { max_tokens?: number; stop?: unknown }) => (request.stop === 'fail' ? ['a', new ChorusError('CHORUS_INVALID_ARGUMENT', 'stop fails here', { param: 'stop', value: 'fail' })] : Array.from({ length: request.max_tokens ?? 4 }, (_, i) => `w${i}`)),
};

/** Runs `body` with a ThreadClient over a fresh fake client, closed after it. */
async function withPair(body: (client: ThreadClient, fake: FakeEngineClient) => Promise<void>): Promise<void> {
  const fake = new FakeEngineClient(fakeOptions);
  const { client, close } = await pair(fake);
  try {
    await body(client, fake);
  } finally {
    close();
  }
}

test('names, kinds, random weights and unknown names answer as the hosted client does', () =>
  withPair(async (client, fake) => {
    assert.deepEqual(client.models(), fake.models());
    assert.deepEqual(client.models('pipeline').map((m) => m.name), ['chat', 'echo']);
    assert.equal(client.resolve('sum').kind, 'ensemble');
    assert.equal(client.resolve('llm', ['model']).state, 'UNAVAILABLE');
    assert.equal(client.randomWeights('echo'), true);
    assert.equal(client.randomWeights('chat'), false);
    assert.equal(client.source, 'fake');
    const expected = (() => {
      try {
        fake.resolve('nope', ['pipeline', 'model']);
      } catch (error) {
        return error as ChorusError;
      }
      throw new Error('unreachable');
    })();
    assert.throws(() => client.resolve('nope', ['pipeline', 'model']), { code: 'CHORUS_NOT_FOUND', message: expected.message, param: 'model' });
  }));

test('a text request streams the hosted client\'s updates; a failure keeps its code and field', () =>
  withPair(async (client, fake) => {
    const request = { text_input: 'hi', max_tokens: 3, seed: 2n ** 60n };
    const here = await lastValueFrom(fake.generate('chat', request).pipe(toArray()));
    const there = await lastValueFrom(client.generate('chat', request).pipe(toArray()));
    assert.deepEqual(there, here);
    assert.equal(there.at(-1)!.choices[0]!.text, 'w0 w1 w2');
    // The request crossed whole (a bigint seed included).
    assert.deepEqual(fake.generated.at(-1)!.request, request);
    await assert.rejects(lastValueFrom(client.generate('chat', { text_input: 'hi', stop: 'fail' })), (error: unknown) => {
      assert.ok(error instanceof ChorusError);
      assert.equal(error.code, 'CHORUS_INVALID_ARGUMENT');
      assert.equal(error.param, 'stop');
      assert.equal(error.status, 400);
      assert.equal(error.message, 'stop fails here');
      return true;
    });
    await assert.rejects(lastValueFrom(client.generate('nope', { text_input: 'hi' })), { code: 'CHORUS_NOT_FOUND', param: 'model' });
  }));

test('tensors cross both ways; a model named for infer is refused by the host', () =>
  withPair(async (client, fake) => {
    const x = { datatype: 'INT64' as const, shape: [3], data: [1n, 2n, 3n] };
    const out = await lastValueFrom(client.infer('sum', { x }));
    assert.deepEqual(out, { y: x });
    const text = await lastValueFrom(client.infer('echo', { text_input: { datatype: 'BYTES', shape: [1, 1], data: ['hello'] } }));
    assert.deepEqual(text.text_output!.data, ['echo hello']);
    // No stream option crosses as none: the hosted client's own default (the fake's: streamed).
    assert.equal(fake.inferred.at(-1)!.stream, true);
    await lastValueFrom(client.infer('echo', { text_input: { datatype: 'BYTES', shape: [1, 1], data: ['x'] } }, { stream: false }));
    assert.equal(fake.inferred.at(-1)!.stream, false);
    await assert.rejects(lastValueFrom(client.infer('llm', { x })), { code: 'CHORUS_UNSUPPORTED', param: 'model' });
  }));

test('unsubscribing cancels the host\'s stream', () =>
  withPair(async (client, fake) => {
    const two = await firstValueFrom(client.generate('chat', { text_input: 'hi', max_tokens: 1000 }).pipe(take(2), toArray()));
    assert.equal(two.length, 2);
    for (let i = 0; i < 50 && fake.cancelled === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(fake.cancelled, 1);
    assert.equal(fake.active, 0);
  }));

test('load, unload and reload run on the host, and their states are seen when they return', () =>
  withPair(async (client, fake) => {
    await client.load('llm');
    assert.equal(client.resolve('llm', ['model']).state, 'READY');
    // The engines' stats stay on the host's thread, with its metrics.
    assert.deepEqual(client.stats(), []);
    await client.reload('llm');
    await client.unload('llm');
    assert.equal(client.resolve('llm', ['model']).state, 'UNAVAILABLE');
    assert.deepEqual(fake.control, ['load llm', 'unload llm', 'load llm', 'unload llm']);
    await assert.rejects(client.load('chat'), { code: 'CHORUS_NOT_FOUND', param: 'model' });
  }));

test('when the host stops, open streams and calls fail with CHORUS_CLOSED, and its streams are cancelled', async () => {
  const fake = new FakeEngineClient(fakeOptions);
  const { client, hosted, snapshots } = await pair(fake);
  const seen: string[] = [];
  const ended = new Promise<unknown>((resolve) => {
    client.generate('chat', { text_input: 'hi', max_tokens: 100000 }).subscribe({ next: (u) => seen.push(u.choices[0]!.delta), error: resolve, complete: () => resolve('completed') });
  });
  for (let i = 0; i < 100 && seen.length < 3; i++) await new Promise((resolve) => setTimeout(resolve, 2));
  hosted.close();
  const error = await ended;
  assert.ok(error instanceof ChorusError, String(error));
  assert.equal(error.code, 'CHORUS_CLOSED');
  assert.equal(fake.active, 0);
  assert.equal(fake.cancelled, 1);
  await assert.rejects(client.load('llm'), { code: 'CHORUS_CLOSED' });
  snapshots.close();
});

test('every thread served from one set of snapshots sees a load another asked for when it returns', async () => {
  const fake = new FakeEngineClient(fakeOptions);
  const snapshots = new ClientSnapshots(fake, { snapshotMs: 60_000 });
  const ends = [new MessageChannel(), new MessageChannel()];
  const hosted = ends.map((c) => hostClient(fake, c.port1, snapshots));
  try {
    const [one, two] = await Promise.all(ends.map((c) => ThreadClient.connect(c.port2)));
    await one!.load('llm');
    // The snapshot went to both before the load returned; the other thread's copy arrives next.
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(two!.resolve('llm', ['model']).state, 'READY');
  } finally {
    for (const h of hosted) h.close();
    snapshots.close();
  }
});

test('a value that cannot be copied between threads fails its own stream, and the others go on', async () => {
  const fake = new FakeEngineClient({ ...fakeOptions, words: (request) => (request.stop === 'odd' ? ['a', 'b'] : ['x', 'y', 'z']) });
  // A host whose pipeline "odd" answers an update holding a function (structured clone refuses it).
  const { port1, port2 } = new MessageChannel();
  const snapshots = new ClientSnapshots(fake);
  const odd = { ...fake, models: () => fake.models(), resolve: fake.resolve.bind(fake), randomWeights: () => false, tokenizers: () => [], source: 'odd', generate: (pipeline: string, request: Record<string, unknown>) => (request.stop === 'odd' ? fake.generate(pipeline, request).pipe(map((u) => ({ ...u, bad: () => 1 }))) : fake.generate(pipeline, request)) };
  const hosted = hostClient(odd as unknown as FakeEngineClient, port1, snapshots);
  try {
    const client = await ThreadClient.connect(port2);
    const [bad, good] = await Promise.allSettled([lastValueFrom(client.generate('chat', { text_input: 'a', stop: 'odd' })), lastValueFrom(client.generate('chat', { text_input: 'b' }))]);
    assert.equal(bad.status, 'rejected');
    assert.match(String((bad as PromiseRejectedResult).reason), /could not be copied between threads/);
    assert.equal(good.status, 'fulfilled');
    assert.equal((good as PromiseFulfilledResult<{ choices: Array<{ text: string }> }>).value.choices[0]!.text, 'x y z');
    // The host's stream of the failed request was cancelled.
    for (let i = 0; i < 50 && fake.active > 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(fake.active, 0);
  } finally {
    hosted.close();
    snapshots.close();
  }
});
