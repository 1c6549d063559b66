/**
 * Every entry of the bundled repository answers a request offline, with nothing in the cache: stories
 * pointed at the real model in ../shared, the others on their fallback (seeded random weights of the
 * real architecture) and the tokenizers shipped in the package (bart's through its GPT-2 fallback).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import type { Tensor } from '../../src/ensemble/index.ts';
import { Service, type PipelineUpdate, type TextRequest } from '../../src/pipeline/index.ts';
import { bundledRepositoryDir, parseSourceOverride } from '../../src/repository/index.ts';
import { TiktokenAdapter } from '../../src/tokenizers/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

// Offline on purpose: the hub is not asked, so the fallbacks are served.
process.env.HF_HUB_OFFLINE = '1';
process.env.CHORUS_CACHE = scratchDir('chorus-bundled-cache-');

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
const bytes = (text: string): Tensor => ({ datatype: 'BYTES', shape: [1, 1], data: [text] });
const u32 = (n: number): Tensor => ({ datatype: 'UINT32', shape: [1, 1], data: [n] });

describe('the bundled repository, offline', () => {
  let service: Service;
  const logged: string[] = [];
  before(() => {
    const overrides = [`stories=${STORIES}/stories260K.bin`].map(parseSourceOverride);
    service = Service.open(bundledRepositoryDir(), { sourceOverrides: overrides, log: (line) => logged.push(line) });
  });
  after(async () => {
    await service.close();
  });

  const answer = async (pipeline: string, request: TextRequest): Promise<PipelineUpdate> => (await lastValueFrom(service.pipeline(pipeline).run(request).pipe(toArray()))).at(-1)!;

  test('stories: the documented story for an empty prompt, greedy; chat through its template', async () => {
    const story = await answer('stories', { text_input: '', temperature: 0, max_tokens: 60 });
    assert.ok(story.choices[0]!.text.startsWith(STORY), story.choices[0]!.text);
    const chat = await answer('stories', { messages: [{ role: 'user', content: 'Lily and Ben went to the park.' }], temperature: 0, max_tokens: 20 });
    assert.equal(chat.usage!.completionTokens, 20);
    assert.ok(chat.choices[0]!.text.length > 20);
  });

  test('gpt: FT\'s ensemble returns the prompt and its continuation; the raw fastertransformer tensors agree', async () => {
    const prompt = 'The quick brown fox';
    const out = await lastValueFrom(service.ensemble('gpt').run({ INPUT_0: bytes(prompt), INPUT_1: u32(5), runtime_top_k: u32(1), is_return_log_probs: { datatype: 'BOOL', shape: [1, 1], data: [true] } }));
    assert.ok((out.OUTPUT_0!.data[0] as string).startsWith(prompt));
    const ids = new TiktokenAdapter({ encoding: 'gpt2' }).encode(prompt);
    assert.deepEqual(out.sequence_length!.data, [ids.length + 5]);
    assert.equal(out.output_log_probs!.shape.join(), '1,1,5');
    const raw = await lastValueFrom(service.ensemble('fastertransformer').run({ input_ids: { datatype: 'UINT32', shape: [1, ids.length], data: ids }, input_lengths: u32(ids.length), request_output_len: u32(5), runtime_top_k: u32(1) }));
    assert.deepEqual(raw.output_ids!.data.slice(0, ids.length), ids);
    assert.equal(new TiktokenAdapter({ encoding: 'gpt2' }).decode(raw.output_ids!.data as number[]), out.OUTPUT_0!.data[0]);
    assert.ok(logged.some((line) => /WARNING: model gpt2: .* serving RANDOM weights/.test(line)), 'the fallback is announced');
    const completion = await answer('gpt2', { text_input: prompt, max_tokens: 4, temperature: 0 });
    assert.equal(completion.usage!.completionTokens, 4);
    assert.equal(completion.choices[0]!.finishReason, 'length');
  });

  test('t5: text to text, and the encoder\'s hidden states', async () => {
    const translated = await answer('t5', { text_input: 'translate English to German: The house is wonderful.', max_tokens: 6 });
    assert.equal(translated.usage!.completionTokens, 6);
    // FT's raw T5 tensors, as sample_request_single_t5.json sends them, give the same greedy ids.
    const t5 = await service.store.tokenizer('t5');
    const ids = t5.encode('translate English to German: The house is wonderful.');
    const raw = await lastValueFrom(
      service.ensemble('t5-fastertransformer').run({ input_ids: { datatype: 'UINT32', shape: [1, ids.length], data: ids }, sequence_length: u32(ids.length), max_output_len: u32(6), runtime_top_k: u32(1) }),
    );
    assert.deepEqual(raw.sequence_length!.data, [6]);
    assert.equal(t5.decode(raw.output_ids!.data as number[], { skipSpecialTokens: true }), translated.choices[0]!.text);
    const hidden = await lastValueFrom(service.ensemble('t5-encoder').run({ text: bytes('translate English to German: The house is wonderful.') }));
    const tokens = hidden.sequence_length!.data[0] as number;
    assert.deepEqual(hidden.output_hidden_state!.shape, [1, tokens, 512]);
    assert.ok(hidden.output_hidden_state!.data.every((v) => Number.isFinite(v)));
  });

  test('bart: an article to a summary with its beam-search defaults', async () => {
    const summary = await answer('bart', { text_input: 'The city council met on Tuesday to discuss the new park. Residents asked for more trees.', max_tokens: 8, min_tokens: 2 });
    assert.equal(summary.choices.length, 1);
    assert.ok(['length', 'end_id'].includes(summary.choices[0]!.finishReason!));
    // Its tokenizer is not in the cache: GPT-2's serves in its place, and says so.
    assert.equal(service.store.tokenizerFallback('bart'), 'gpt2');
    assert.ok(logged.some((line) => /WARNING: tokenizer bart: .* using tokenizer gpt2 in its place/.test(line)), logged.join('\n'));
  });

  for (const pipeline of ['llama3', 'qwen3', 'phi3']) {
    test(`${pipeline}: completion and chat on its tiny random fallback, through the stories tokenizer in its place`, async () => {
      const completion = await answer(pipeline, { text_input: 'Once upon a time', max_tokens: 5, temperature: 0 });
      assert.equal(completion.usage!.completionTokens, 5);
      const chat = await answer(pipeline, { messages: [{ role: 'user', content: 'Hello there.' }], max_tokens: 3, temperature: 0 });
      assert.equal(chat.usage!.completionTokens, 3);
      assert.equal(service.store.tokenizerFallback(pipeline), 'stories-tokenizer');
    });
  }

  test('which entries run on random weights: all but stories, pointed at its real file', () => {
    for (const name of ['gpt', 'gpt2', 't5', 'bart', 'fastertransformer', 't5-encoder', 't5-fastertransformer', 't5-small', 'llama3', 'qwen3', 'phi3', 'mistral', 'gemma2']) assert.ok(service.randomWeights(name).length > 0, name);
    assert.deepEqual(service.randomWeights('stories'), []);
    assert.deepEqual(service.randomWeights('t5-fastertransformer'), ['t5-small']);
    assert.equal(service.store.servesRandomWeights('stories'), false);
  });
});
