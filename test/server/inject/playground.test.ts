/** The playground's page and its repository map over a fake engine client. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildServer, Metrics } from '../../../src/server/index.ts';
import { FakeEngineClient } from '../../helpers/fake-client.ts';

test('the page is served with its headers; /chorus/repository maps pipelines, ensembles and models with state', async () => {
  const client = new FakeEngineClient({ randomWeights: ['stories'], pipelines: ['stories'], ensembles: [{ name: 'e', inputs: [{ name: 'a', datatype: 'BYTES', shape: [-1, 1], optional: true }], outputs: [{ name: 'b', datatype: 'BYTES', shape: [-1, 1], optional: false }] }], models: ['m'] });
  const app = await buildServer({ client, metrics: new Metrics(), apiKey: 'k' });
  const page = await app.inject('/');
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.match(String(page.headers['content-security-policy']), /default-src 'self'/);
  await client.load('m');
  const map = await app.inject({ url: '/chorus/repository', headers: { authorization: 'Bearer k' } });
  assert.deepEqual(map.json(), {
    pipelines: [{ name: 'stories', description: null, model: 'stories', chat: true, random_weights: true }],
    ensembles: [{ name: 'e', description: null, random_weights: false, inputs: [{ name: 'a', datatype: 'BYTES', optional: true }], outputs: [{ name: 'b', datatype: 'BYTES' }], steps: [] }],
    models: [{ name: 'm', engine: 'generate', device: 'cpu', state: 'READY', random_weights: false }],
    tokenizers: [],
  });
  assert.equal((await app.inject('/chorus/repository')).statusCode, 401);
  const chat = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer k' }, payload: { model: 'stories', messages: [{ role: 'user', content: 'hi' }] } });
  assert.equal(chat.headers['x-chorus-random-weights'], 'true', 'an answer from a pipeline on random weights says so');
  await app.close();
});
