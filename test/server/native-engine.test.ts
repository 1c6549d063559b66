import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine } from '../../src/generation/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { startServer, storiesRepository, type TestServer } from '../helpers/server.ts';

const { addon, reason } = loadNative();

// Models of one checkpoint: on the native engine (native_engine: true), with its continuous core, and on the TypeScript engine.
describe('native_engine in a model definition', { skip: addon === undefined ? `the native addon: ${reason}` : false }, () => {
  let server: TestServer;
  before(async () => {
    const repository = storiesRepository({
      stories: `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 4\nnative_engine: true\n`,
      'stories-ts': `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nflavor: cuda\nnative_engine: false\n`,
      'stories-core': `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nmax_batch_size: 4\nnative_engine: true\ncontinuous_core: true\n`,
    });
    writeFileSync(join(repository, 'pipelines/stories-core.yaml'), 'model: stories-core\nchat_template: tokenizer\ndefaults: { max_tokens: 60, temperature: 0 }\n');
    server = await startServer(repository);
  });
  after(async () => {
    await server.close();
  });

  test('serves OpenAI completions, streamed and not, from the native engine with the TypeScript engine\'s text', async () => {
    const native = await server.service.store.model('stories');
    const typescript = await server.service.store.model('stories-ts');
    assert.ok(native.engine === 'generate' && native.generator instanceof NativeEngine);
    assert.ok(typescript.engine === 'generate' && typescript.generator instanceof OrtEngine);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused' });
    const prompt = 'Once upon a time';
    const answer = async (model: string) => (await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 })).choices[0]!.text;
    const text = await answer('stories');
    assert.match(text, /^, there was a little girl named Lily/);
    // The engines themselves: the same tokens for the same ids.
    const ids = [1, 403, 407, 300];
    const tokens = async (engine: NativeEngine | OrtEngine | unknown) =>
      (await lastValueFrom((engine as NativeEngine).submit({ inputIds: ids, params: { temperature: 0, request_output_len: 60 } }).pipe(toArray()))).map((e) => e.token);
    assert.deepEqual(await tokens(native.generator), await tokens(typescript.generator));
    let streamed = '';
    for await (const chunk of await client.completions.create({ model: 'stories', prompt, max_tokens: 40, temperature: 0, stream: true })) streamed += chunk.choices[0]?.text ?? '';
    assert.equal(streamed, text);
    assert.ok(native.generator.stats().decodeSteps > 0);
  });

  test('continuous_core serves the step loop\'s text, streamed and not, greedy and seeded samples, stop strings cutting it', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused' });
    const requests = [
      { prompt: 'Once upon a time', max_tokens: 40, temperature: 0 },
      { prompt: 'The cat', max_tokens: 50, temperature: 0.8, top_p: 0.9, seed: 7 },
      { prompt: 'Lily saw a dog', max_tokens: 60, temperature: 0.7, seed: 3, stop: ['.'] },
      { prompt: 'One day', max_tokens: 30, temperature: 1, frequency_penalty: 0.5, seed: 11 },
    ];
    const whole = (model: string) => Promise.all(requests.map(async (r) => (await client.completions.create({ model, ...r })).choices[0]!.text));
    const streamed = (model: string) =>
      Promise.all(
        requests.map(async (r) => {
          let text = '';
          for await (const chunk of await client.completions.create({ model, ...r, stream: true })) text += chunk.choices[0]?.text ?? '';
          return text;
        }),
      );
    const want = await whole('stories');
    assert.deepEqual(await whole('stories-core'), want);
    assert.deepEqual(await streamed('stories-core'), want);
    assert.ok(!want[2]!.slice(0, -1).includes('.'));
    const core = await server.service.store.model('stories-core');
    assert.ok(core.engine === 'generate');
    // The stop string's requests end when the pipeline finds it (cancelled in the engine), the rest finish.
    const stats = core.generator.stats();
    assert.deepEqual([stats.requestsFinished + stats.requestsCancelled, stats.running], [2 * requests.length, 0]);
  });

  test('cuda_options and batch_invariant on the TypeScript engine are refused, naming the field', async () => {
    const base = `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\nnative_engine: false\n`;
    const other = await startServer(storiesRepository({ stories: `${base}cuda_options:\n  gpu_mem_limit: 1000000\n`, invariant: `${base}batch_invariant: true\n` }));
    try {
      await assert.rejects(other.service.store.model('stories'), (error: Error & { param?: string }) => error.param === 'cuda_options' && /native engine/.test(error.message));
      await assert.rejects(other.service.store.model('invariant'), (error: Error & { param?: string }) => error.param === 'batch_invariant' && /native engine/.test(error.message));
    } finally {
      await other.close();
    }
  });
});
