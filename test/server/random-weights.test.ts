/**
 * A model on its random-weights fallback says so wherever a user looks: /v1/models, KServe metadata,
 * /chorus/repository, and a header on every answer (streamed ones too). A tokenizer that cannot be had
 * is named in the error.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { startServer, storiesRepository, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';
process.env.CHORUS_CACHE = scratchDir('chorus-random-cache-');

let server: TestServer;
before(async () => {
  const repository = storiesRepository({
    stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n`,
    noise: 'engine: generate\nsource: hf:nobody/noise\ntokenizer: stories\nfallback: { arch: llama, size: tiny, seed: 7 }\n',
  });
  writeFileSync(join(repository, 'pipelines/noise.yaml'), 'model: noise\nchat_template: tokenizer\n');
  writeFileSync(join(repository, 'tokenizers/lost.yaml'), 'type: sentencepiece\nsource: hf:nobody/lost\n');
  writeFileSync(join(repository, 'pipelines/lost.yaml'), 'model: stories\ntokenizer: lost\n');
  server = await startServer(repository);
});
after(async () => server?.close());

const get = async (path: string): Promise<unknown> => (await fetch(`${server.url}${path}`)).json();
const post = (path: string, body: unknown): Promise<Response> => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('the listings say which pipelines, ensembles and models run on random weights', async () => {
  const models = (await get('/v1/models')) as { data: Array<{ id: string; random_weights: boolean }> };
  assert.equal(models.data.find((m) => m.id === 'noise')?.random_weights, true);
  assert.equal(models.data.find((m) => m.id === 'stories')?.random_weights, false);
  assert.equal(((await get('/v2/models/noise')) as { random_weights: boolean }).random_weights, true);
  assert.equal(((await get('/v2/models/stories')) as { random_weights: boolean }).random_weights, false);
  const repository = (await get('/chorus/repository')) as { models: Array<{ name: string; random_weights: boolean }>; pipelines: Array<{ name: string; random_weights: boolean }> };
  assert.equal(repository.models.find((m) => m.name === 'noise')?.random_weights, true);
  assert.equal(repository.models.find((m) => m.name === 'stories')?.random_weights, false);
  assert.equal(repository.pipelines.find((p) => p.name === 'noise')?.random_weights, true);
});

test('every answer of a model on random weights carries x-chorus-random-weights, streamed or not', async () => {
  const whole = await post('/v2/models/noise/generate', { text_input: 'Once', max_tokens: 3 });
  assert.equal(whole.status, 200, await whole.clone().text());
  assert.equal(whole.headers.get('x-chorus-random-weights'), 'true');
  const streamed = await post('/v1/completions', { model: 'noise', stream: true, prompt: 'hi', max_tokens: 3 });
  const events = await streamed.text();
  assert.equal(streamed.status, 200, events);
  assert.equal(streamed.headers.get('x-chorus-random-weights'), 'true');
  assert.doesNotMatch(events, /"error"/);
  assert.match(events, /data: \[DONE\]/);
  assert.equal((await fetch(`${server.url}/v2/models/noise`)).headers.get('x-chorus-random-weights'), 'true');
  const real = await post('/v2/models/stories/generate', { text_input: 'Once', max_tokens: 3 });
  assert.equal(real.status, 200);
  assert.equal(real.headers.get('x-chorus-random-weights'), null);
});

test('a tokenizer that is not there is named in the error', async () => {
  const response = await post('/v2/models/lost/generate', { text_input: 'Once', max_tokens: 3 });
  const { error } = (await response.json()) as { error: string };
  assert.equal(response.status, 503);
  assert.match(error, /^tokenizer lost: nobody\/lost is not in the cache/);
});
