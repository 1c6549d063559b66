/** The engine client over a real repository (the ensembles fixture, stories260K): names, streams, cancellation. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { lastValueFrom } from 'rxjs';
import { RepositoryClient } from '../../src/serving/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { storiesRepository } from '../helpers/server.ts';

let client: RepositoryClient;
before(() => {
  client = RepositoryClient.open(storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 4\n` }), { log: () => {} });
});
after(async () => {
  await client.close();
});

const stats = () => client.stats().find((s) => s.name === 'stories');

test('names resolve by kind in the order asked; unknown names list those of the kinds asked', () => {
  const kinds = client.models().map((m) => `${m.kind} ${m.name}`);
  assert.ok(kinds.includes('pipeline story-ensemble') && kinds.includes('ensemble stories') && kinds.includes('model stories'), kinds.join(', '));
  assert.equal(client.resolve('stories').kind, 'pipeline');
  assert.equal(client.resolve('stories', ['ensemble', 'pipeline']).kind, 'ensemble');
  assert.equal(client.resolve('stories', ['model']).state, 'UNAVAILABLE');
  assert.throws(() => client.resolve('nope', ['model']), { code: 'CHORUS_NOT_FOUND', message: 'unknown model nope; there are: stories' });
  const ensemble = client.resolve('stories', ['ensemble']);
  assert.deepEqual(ensemble.steps?.map((s) => `${s.kind} ${s.target}`), ['detokenize stories', 'tokenize stories', 'generate stories']);
});

test('infer on a pipeline maps tensors to its fields and back; unknown names fail the stream', async () => {
  // story-ensemble is only a pipeline (stories is an ensemble too, and infer takes the ensemble first).
  const out = await lastValueFrom(client.infer('story-ensemble', { text_input: { datatype: 'BYTES', shape: [1, 1], data: ['Once'] }, max_tokens: { datatype: 'INT32', shape: [1, 1], data: [5] }, temperature: { datatype: 'FP32', shape: [1, 1], data: [0] } }));
  const whole = await lastValueFrom(client.generate('story-ensemble', { text_input: 'Once', max_tokens: 5, temperature: 0 }));
  assert.deepEqual(out.text_output?.data, [whole.choices[0]!.text]);
  assert.equal(out.completion_tokens, undefined, 'an ensemble pipeline reports no token counts');
  assert.equal(stats()?.name, 'stories', 'the model loaded on first use shows in stats');
  await assert.rejects(lastValueFrom(client.infer('nope', {})), { code: 'CHORUS_NOT_FOUND' });
});

test('unsubscribing from generate stops the engine within one step', async () => {
  await client.load('stories');
  const before = stats()!;
  await new Promise<void>((resolve) => {
    let updates = 0;
    const subscription = client.generate('stories', { text_input: 'Once upon a time', max_tokens: 300, temperature: 0.8, seed: 3 }).subscribe((update) => {
      if (update.choices.length > 0 && ++updates === 5) {
        subscription.unsubscribe();
        resolve();
      }
    });
  });
  const atCancel = stats()!.decodeSteps;
  while (stats()!.running > 0) await new Promise((r) => setTimeout(r, 5));
  const now = stats()!;
  assert.equal(now.requestsCancelled, before.requestsCancelled + 1);
  assert.ok(now.decodeSteps - atCancel <= 1, `${now.decodeSteps - atCancel} decode steps after the cancel`);
  assert.ok(now.tokensGenerated - before.tokensGenerated < 300);
});

test('load, unload and reload change the model\'s state; a pipeline is not a model of the store', async () => {
  await client.unload('stories');
  assert.equal(client.resolve('stories', ['model']).state, 'UNAVAILABLE');
  await client.reload('stories');
  assert.equal(client.resolve('stories', ['model']).state, 'READY');
  await assert.rejects(client.load('story-ensemble'), { code: 'CHORUS_NOT_FOUND' });
});
