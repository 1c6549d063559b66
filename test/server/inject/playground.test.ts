/** The playground's page and its repository map over a fake engine client. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildServer, Metrics } from '../../../src/server/index.ts';
import { FakeEngineClient } from '../../helpers/fake-client.ts';

test('the page is served with its headers; /chorus/repository maps pipelines, ensembles and models with state', async () => {
  const client = new FakeEngineClient({ pipelines: ['stories'], ensembles: [{ name: 'e', inputs: [{ name: 'a', datatype: 'BYTES', shape: [-1, 1], optional: true }], outputs: [{ name: 'b', datatype: 'BYTES', shape: [-1, 1], optional: false }] }], models: ['m'] });
  const app = await buildServer({ client, metrics: new Metrics(), apiKey: 'k' });
  const page = await app.inject('/');
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.match(String(page.headers['content-security-policy']), /default-src 'self'/);
  await client.load('m');
  const map = await app.inject({ url: '/chorus/repository', headers: { authorization: 'Bearer k' } });
  assert.deepEqual(map.json(), {
    pipelines: [{ name: 'stories', description: null, model: 'stories', chat: true }],
    ensembles: [{ name: 'e', description: null, inputs: [{ name: 'a', datatype: 'BYTES', optional: true }], outputs: [{ name: 'b', datatype: 'BYTES' }], steps: [] }],
    models: [{ name: 'm', engine: 'generate', device: 'cpu', state: 'READY' }],
  });
  assert.equal((await app.inject('/chorus/repository')).statusCode, 401);
  await app.close();
});
