import assert from 'node:assert/strict';
import { copyFileSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { Service, type PipelineUpdate, type TextRequest } from '../../src/pipeline/index.ts';
import { parseSourceOverride } from '../../src/repository/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const REPOSITORY = join(ROOT, 'test/fixtures/repositories/ensembles');
const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';

describe('pipelines', () => {
  let service: Service;
  before(() => {
    service = Service.open(REPOSITORY, { log: () => {} });
  });
  after(async () => {
    await service.close();
  });

  const updates = (pipeline: string, request: TextRequest): Promise<PipelineUpdate[]> => lastValueFrom(service.pipeline(pipeline).run(request).pipe(toArray()));
  const joined = (all: PipelineUpdate[], index = 0): string => all.flatMap((u) => u.choices.filter((c) => c.index === index).map((c) => c.delta)).join('');

  test('a model pipeline (no ensemble written) tells the story for an empty prompt, greedy by its defaults', async () => {
    const all = await updates('stories', { text_input: '' });
    const last = all.at(-1)!;
    assert.ok(last.choices[0]!.text.startsWith(STORY), last.choices[0]!.text);
    assert.equal(joined(all), last.choices[0]!.text);
    assert.equal(last.choices[0]!.finishReason, 'length');
    assert.deepEqual(last.usage, { promptTokens: 1, completionTokens: 60 });
    assert.ok(all.length > 30, 'streamed in many updates');
  });

  test('an ensemble pipeline maps its fields and defaults onto the ensemble\'s tensors', async () => {
    const viaEnsemble = (await updates('story-ensemble', { text_input: '', temperature: 0 })).at(-1)!.choices[0]!.text;
    const viaModel = (await updates('stories', { text_input: '', max_tokens: 30 })).at(-1)!.choices[0]!.text;
    assert.equal(viaEnsemble, viaModel);
  });

  test('stop strings end the text before them, across token boundaries, and stop the generation', async () => {
    const all = await updates('stories', { text_input: '', stop: ['Lily.', 'park'] });
    const last = all.at(-1)!;
    assert.equal(last.choices[0]!.text, 'Once upon a time, there was a little girl named ');
    assert.equal(last.choices[0]!.finishReason, 'stop');
    assert.ok(last.usage!.completionTokens < 20);
  });

  test('chat messages go through the tokenizer\'s chat template', async () => {
    const chat = (await updates('stories', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 12 })).at(-1)!.choices[0]!.text;
    // The template renders "<s>Once upon a time\n"; the same text, without the tokenizer's own BOS, gives the same continuation.
    const plain = (await updates('stories', { text_input: 'Once upon a time\n', max_tokens: 12 })).at(-1)!.choices[0]!.text;
    assert.equal(chat, plain);
  });

  test('sampling fields change the text; a seed makes it repeatable', async () => {
    const sampled = async (seed: number): Promise<string> => (await updates('stories', { text_input: '', temperature: 1, top_k: 40, seed, max_tokens: 30 })).at(-1)!.choices[0]!.text;
    assert.equal(await sampled(3), await sampled(3));
    assert.notEqual(await sampled(3), await sampled(4));
  });

  test('the factual-nucleus fields top_p_decay, top_p_min and top_p_reset_ids change the text', async () => {
    const text = async (fields: TextRequest): Promise<string> => (await updates('stories', { text_input: '', temperature: 1, top_p: 0.95, seed: 3, max_tokens: 40, ...fields })).at(-1)!.choices[0]!.text;
    const plain = await text({});
    const decayed = await text({ top_p_decay: 0.01 });
    assert.notEqual(decayed, plain);
    assert.equal(await text({ top_p_decay: 0.01, top_p_min: 0.95 }), plain, 'a floor at top_p undoes the decay');
    const stories = await service.store.tokenizer('stories');
    const early = stories.encode(decayed, { addSpecialTokens: false })[2]!;
    assert.notEqual(await text({ top_p_decay: 0.01, top_p_reset_ids: [early] }), decayed, 'generating a reset id restores the nucleus');
    await assert.rejects(updates('stories', { text_input: '', top_p_reset_ids: [-1] }), { message: 'top_p_reset_ids[0] must be a non-negative integer, got -1' });
  });

  test('a seed beyond 2^53 is taken exactly', async () => {
    const text = async (seed: number | bigint): Promise<string> => (await updates('stories', { text_input: '', temperature: 1, seed, max_tokens: 20 })).at(-1)!.choices[0]!.text;
    assert.equal(await text(2n ** 64n - 5n), await text(2n ** 64n - 5n));
    assert.notEqual(await text(2n ** 64n - 5n), await text(2n ** 64n - 6n));
  });

  test('a plain request (run on the engine directly) answers as the same request through the ensemble (logprobs)', async () => {
    const requests: TextRequest[] = [
      { text_input: '' },
      { text_input: 'Tom had a red ball.', max_tokens: 25, temperature: 0.9, seed: 3 },
      { text_input: '', max_tokens: 40, stop: ['park', 'Lily'] },
      { messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, top_k: 5, temperature: 1, seed: 11 },
    ];
    for (const request of requests) {
      const direct = await updates('stories', request);
      const ensemble = await updates('stories', { ...request, logprobs: true });
      const [a, b] = [direct.at(-1)!, ensemble.at(-1)!];
      assert.equal(joined(direct), joined(ensemble), JSON.stringify(request));
      assert.equal(a.choices[0]!.text, b.choices[0]!.text);
      assert.equal(a.choices[0]!.finishReason, b.choices[0]!.finishReason);
      assert.deepEqual(a.usage, b.usage);
      assert.ok(direct.slice(0, -1).every((u) => u.choices[0]!.logprobs === undefined) && ensemble.slice(0, -1).every((u) => u.choices[0]!.logprobs !== undefined), 'one path each');
    }
  });

  test('bad requests name the field', async () => {
    await assert.rejects(updates('stories', { text_input: '', max_tokens: -1 }), { message: 'max_tokens must be a non-negative integer, got -1' });
    await assert.rejects(updates('stories', { text_input: '', temperature: 'hot' as unknown as number }), { message: 'temperature must be a number, got "hot"' });
    await assert.rejects(updates('stories', { text_input: '', colour: 'red' }), { message: /^pipeline stories takes no field colour; it takes: text_input, messages, stop, stream, max_tokens/ });
    await assert.rejects(updates('stories', { text_input: '', stop: [''] }), { message: 'stop must be a non-empty string or a list of them, got [""]' });
    await assert.rejects(updates('stories', {}), { message: 'text_input must be a string (or give messages), got nothing' });
    await assert.rejects(updates('stories', { messages: [{ role: 'user' } as unknown as { role: string; content: string }] }), { message: 'messages[0] must be an object with string role and content, got {"role":"user"}' });
    // An error from below names the request's field, not the input it fills.
    await assert.rejects(updates('stories', { text_input: '', top_p: 1.5 }), { message: 'step generate: top_p must be a number in (0, 1], got 1.5', param: 'top_p' });
    await assert.rejects(updates('stories', { text_input: '', top_k: 5, beam_width: 2 }), { message: /^step generate: top_k 5 has no effect with beam_width 2/, param: 'top_k' });
  });

  test('chat to a pipeline without a template is refused before its model loads', async () => {
    const fresh = Service.open(REPOSITORY, { log: () => {} });
    try {
      await assert.rejects(lastValueFrom(fresh.pipeline('story-ensemble').run({ messages: [{ role: 'user', content: 'hi' }] })), {
        message: 'pipeline story-ensemble has no chat template: send the text as a prompt (POST /v1/completions, or text_input on generate)',
        param: 'messages',
      });
      assert.deepEqual(fresh.store.loadedModels(), [], 'nothing loaded');
    } finally {
      await fresh.close();
    }
  });

  test('a prompt that cannot fit the context is refused: by its bytes before tokenizing, else by its tokens', async () => {
    await assert.rejects(updates('stories', { text_input: 'Once upon a time. '.repeat(200_000) }), {
      code: 'CHORUS_CANNOT_FIT',
      param: 'prompt',
      message: /^the prompt is 3600000 bytes of text, more than fit the context of model stories \(512 tokens, at most \d+ bytes\)$/,
    });
    await assert.rejects(updates('stories', { text_input: 'Once upon a time. '.repeat(300) }), {
      code: 'CHORUS_CANNOT_FIT',
      param: 'prompt',
      message: /^step generate: the prompt is \d+ tokens; model stories holds 512 tokens, prompt and output together$/,
    });
  });
});

test('--set-source points a definition at other files; a name that fits nothing is refused', () => {
  const moved = Service.open(REPOSITORY, { log: () => {}, sourceOverrides: [parseSourceOverride(`model:stories=${STORIES}/stories260K.bin`), parseSourceOverride(`tokenizer:stories=${STORIES}/tok512.bin`)] });
  assert.equal(moved.repository.models.get('stories')!.value.source, `${STORIES}/stories260K.bin`);
  assert.equal(moved.repository.tokenizers.get('stories')!.value.source, `${STORIES}/tok512.bin`);
  assert.throws(() => Service.open(REPOSITORY, { sourceOverrides: [parseSourceOverride('stories=/x')] }), {
    message: '--set-source stories: both a model and a tokenizer are named stories; write model:stories=... or tokenizer:stories=...' });
  assert.throws(() => Service.open(REPOSITORY, { sourceOverrides: [parseSourceOverride('model:stories=/nowhere/x.bin')], log: () => {} }), {
    code: 'CHORUS_CONFIG_INVALID',
    message: /source path \/nowhere\/x\.bin does not exist/ });
  assert.throws(() => Service.open(REPOSITORY, { sourceOverrides: [parseSourceOverride('nobody=/x')] }), { message: '--set-source nobody: no model or tokenizer is named nobody; there are: stories, stories' });
  assert.throws(() => parseSourceOverride('no-equals-sign'), { message: '--set-source must be [model:|tokenizer:]NAME=SOURCE, got "no-equals-sign"' });
});

test('a checkpoint source is built once and cached by its content: a copy elsewhere finds the same build', async () => {
  const cache = scratchDir('chorus-content-cache-');
  const saved = process.env.CHORUS_CACHE;
  process.env.CHORUS_CACHE = cache;
  try {
    const copy = join(scratchDir('chorus-copy-'), 'stories260K.bin');
    copyFileSync(`${STORIES}/stories260K.bin`, copy);
    const dirs: string[] = [];
    for (const source of [`${STORIES}/stories260K.bin`, copy]) {
      const service = Service.open(REPOSITORY, { log: () => {}, sourceOverrides: [parseSourceOverride(`model:stories=${source}`)] });
      dirs.push((await service.store.model('stories')).dir);
      await service.close();
    }
    assert.equal(dirs[0], dirs[1]);
    assert.deepEqual(readdirSync(join(cache, 'builds')), [basename(dirs[0]!)]);
  } finally {
    if (saved === undefined) delete process.env.CHORUS_CACHE;
    else process.env.CHORUS_CACHE = saved;
  }
});
