import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { STORIES } from '../helpers/paths.ts';
import { sseData, startServer, storiesRepository, type TestServer } from '../helpers/server.ts';

// The ensembles fixture repository with its stories model built and served with the GreedySearch model.
let server: TestServer;
before(async () => {
  server = await startServer(storiesRepository({ stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 16\ngreedy_search: true\n` }));
});
after(async () => {
  await server.close();
});

const post = (path: string, body: unknown) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function engineStats() {
  await server.client.load('stories');
  return server.client.stats().find((s) => s.name === 'stories')!;
}

test('greedy_search: answers that are not streamed come from GreedySearch runs, with the streamed text', async () => {
  const request = { text_input: 'Once upon a time', parameters: { max_tokens: 48, temperature: 0 } };
  const whole = (await (await post('/v2/models/stories/generate', request)).json()) as { text_output: string; finish_reason: string; usage: { completion_tokens: number } };
  assert.equal((await engineStats()).greedySearchRuns, 1);
  assert.equal(whole.finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 48);
  const streamed = sseData(await (await post('/v2/models/stories/generate_stream', request)).text()).map((data) => JSON.parse(data) as { text_output: string });
  assert.equal((await engineStats()).greedySearchRuns, 1, 'a streamed request stays in the step loop');
  assert.equal(streamed.map((e) => e.text_output).join(''), whole.text_output);

  // The OpenAI route without stream, and KServe infer, take it too; a stop string still cuts the text.
  const completion = (await (await post('/v1/completions', { model: 'stories', prompt: 'Once upon a time', max_tokens: 48, temperature: 0 })).json()) as { choices: Array<{ text: string }> };
  assert.equal(completion.choices[0]!.text, whole.text_output);
  const stop = whole.text_output.split(' ').slice(3, 5).join(' ');
  const cut = (await (await post('/v1/completions', { model: 'stories', prompt: 'Once upon a time', max_tokens: 48, temperature: 0, stop })).json()) as { choices: Array<{ text: string; finish_reason: string }> };
  assert.equal(cut.choices[0]!.text, whole.text_output.slice(0, whole.text_output.indexOf(stop)));
  assert.equal(cut.choices[0]!.finish_reason, 'stop');
  // KServe infer on the ensemble under the story-ensemble pipeline: its story is the streamed one.
  const viaStream = sseData(await (await post('/v2/models/story-ensemble/generate_stream', { text_input: 'Once upon a time', max_tokens: 48, temperature: 0 })).text())
    .map((data) => (JSON.parse(data) as { text_output: string }).text_output)
    .join('');
  const infer = (await (
    await post('/v2/models/stories/infer', {
      inputs: [
        { name: 'prompt', datatype: 'BYTES', shape: [1, 1], data: ['Once upon a time'] },
        { name: 'length', datatype: 'UINT32', shape: [1, 1], data: [48] },
        { name: 'temperature', datatype: 'FP32', shape: [1, 1], data: [0] },
      ],
    })
  ).json()) as { outputs: Array<{ name: string; data: unknown[] }> };
  assert.ok(infer.outputs, JSON.stringify(infer));
  assert.equal(infer.outputs.find((o) => o.name === 'story')!.data[0], viaStream);
  assert.equal((await engineStats()).greedySearchRuns, 4);

  // Sampling is not greedy: the step loop serves it, stream or not.
  await post('/v2/models/stories/generate', { text_input: 'Once', parameters: { max_tokens: 8, temperature: 0.8, seed: 1 } });
  assert.equal((await engineStats()).greedySearchRuns, 4);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /chorus_engine_greedy_search_runs\{model="stories"\} 4/);
});
