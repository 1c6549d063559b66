import assert from 'node:assert/strict';
import { cpSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { OrtEngine, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { DecoderSession, GreedySearchSession } from '../../src/runtime/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-greedy-');
const dirs = { stories: join(root, 'stories'), gpt2: join(root, 'gpt2'), qwen2: join(root, 'qwen2'), llama: join(root, 'llama') };

before(() => {
  // llama2.c's stories260K ends each story with BOS (1), which starts the next: a copy of its Hugging
  // Face checkpoint that says so in eos_token_id ends there.
  const hf = join(root, 'stories-hf');
  cpSync(`${STORIES}/hf`, hf, { recursive: true });
  const config = JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(hf, 'config.json'), JSON.stringify({ ...config, eos_token_id: 1 }));
  buildModel({ source: hf, out: dirs.stories, greedySearch: true });
  for (const arch of ['gpt2', 'qwen2', 'llama'] as const) {
    makeCheckpoint({ arch, size: 'tiny', seed: 5, out: join(root, `${arch}-ckpt`) });
    buildModel({ source: join(root, `${arch}-ckpt`), out: dirs[arch], greedySearch: true, flavor: arch === 'llama' ? 'cuda' : 'portable' });
  }
});

function run(engine: OrtEngine, inputIds: number[], params: SamplingParams, stream: boolean): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds, params, stream }).pipe(toArray()));
}

describe('chorus build --greedy-search', () => {
  test('writes the GreedySearch model beside the decoder, both reading one weights file', () => {
    const onnx = join(dirs.gpt2, 'onnx');
    assert.ok(existsSync(join(onnx, 'decoder_model_greedy.onnx')));
    const data = statSync(join(onnx, 'decoder_model_merged.onnx_data')).size;
    // The weights are in the shared data file, not inside either model.
    assert.ok(statSync(join(onnx, 'decoder_model_greedy.onnx')).size < data / 4);
    assert.ok(statSync(join(onnx, 'decoder_model_merged.onnx')).size < data / 4);
    assert.equal(existsSync(join(onnx, 'decoder_model_greedy.onnx_data')), false);
    const info = JSON.parse(readFileSync(join(dirs.gpt2, 'chorus_build.json'), 'utf8')) as { greedySearch?: { eosTokenId: number } };
    const config = JSON.parse(readFileSync(join(dirs.gpt2, 'config.json'), 'utf8')) as { eos_token_id: number };
    assert.deepEqual(info.greedySearch, { eosTokenId: config.eos_token_id });
  });

  test('refuses encoder-decoders, naming the option', () => {
    makeCheckpoint({ arch: 't5', size: 'tiny', seed: 1, out: join(root, 't5-ckpt') });
    assert.throws(() => buildModel({ source: join(root, 't5-ckpt'), out: join(root, 't5'), greedySearch: true }), (error: Error & { code?: string; param?: string }) => {
      assert.equal(error.code, 'CHORUS_UNSUPPORTED');
      assert.equal(error.param, 'greedySearch');
      return true;
    });
  });

  for (const name of ['gpt2', 'qwen2', 'llama'] as const) {
    test(`${name}: one GreedySearch run of a padded batch gives each prompt's greedy ids`, async () => {
      const greedy = (await GreedySearchSession.open(dirs[name]))!;
      const decoder = await DecoderSession.open(dirs[name]);
      try {
        const prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [40, 41, 42, 43]];
        const out = await greedy.run(prompts, 20);
        for (const [i, prompt] of prompts.entries()) assert.deepEqual(out[i], await decoder.greedy(prompt, 20), `prompt ${i}`);
      } finally {
        await greedy.close();
        await decoder.close();
      }
    });
  }
});

describe('OrtEngine GreedySearch fast path', () => {
  const engines: OrtEngine[] = [];
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const open = async (dir: string, greedySearch = true): Promise<OrtEngine> => {
    const engine = await OrtEngine.open(dir, { maxBatchSize: 8, greedySearch });
    engines.push(engine);
    return engine;
  };

  test('non-streamed greedy requests take it and get the step loop\'s tokens, lengths and end ids', async () => {
    const engine = await open(dirs.stories);
    const requests: Array<{ prompt: number[]; params: SamplingParams }> = [
      // From BOS the story ends with the end id (1) well before 400 tokens.
      { prompt: [1], params: { temperature: 0, request_output_len: 400 } },
      { prompt: [1, 403, 407], params: { temperature: 0, request_output_len: 17 } },
      { prompt: [1, 300, 301, 302, 303, 304], params: { temperature: 0, runtime_top_k: 1, request_output_len: 33 } },
    ];
    const fast = await Promise.all(requests.map((r) => run(engine, r.prompt, r.params, false)));
    assert.equal(engine.stats().greedySearchRuns, 1, 'the three ran as one batch');
    assert.equal(engine.stats().greedySearchRows, 3);
    assert.equal(engine.stats().decodeSteps, 0);
    const stepped = await Promise.all(requests.map((r) => run(engine, r.prompt, r.params, true)));
    assert.ok(engine.stats().decodeSteps > 0);
    assert.equal(engine.stats().greedySearchRuns, 1, 'streamed requests stay in the step loop');
    assert.deepEqual(fast, stepped);
    assert.equal(fast[0]!.at(-1)!.token, 1);
    assert.equal(fast[0]!.at(-1)!.finishReason, 'end_id');
    assert.ok(fast[0]!.length < 400);
    assert.equal(fast[1]!.length, 17);
    assert.equal(fast[1]!.at(-1)!.finishReason, 'length');
    assert.deepEqual(fast[1]!.map((e) => e.index), [...Array(17).keys()]);
    assert.equal(engine.stats().requestsFinished, 6);
  });

  test('requests it cannot serve exactly go to the step loop', async () => {
    const engine = await open(dirs.gpt2);
    const prompt = [3, 4, 5, 6];
    const cases: SamplingParams[] = [
      { temperature: 0.7, random_seed: 3 },
      { temperature: 0, repetition_penalty: 1.3 },
      { temperature: 0, is_return_log_probs: true },
      { temperature: 0, stop_words: [[9]] },
      { temperature: 0, min_length: 4 },
      { temperature: 1, beam_width: 2 },
    ];
    for (const params of cases) await run(engine, prompt, { ...params, request_output_len: 6 }, false);
    assert.equal(engine.stats().greedySearchRuns, 0);
    assert.equal(engine.stats().requestsFinished, cases.length);
  });

  test('an engine opened with greedySearch false, or a directory without the model, never takes it', async () => {
    const off = await open(dirs.gpt2, false);
    const plain = join(root, 'gpt2-plain');
    buildModel({ source: join(root, 'gpt2-ckpt'), out: plain });
    const without = await open(plain);
    const a = await run(off, [3, 4, 5], { temperature: 0, request_output_len: 9 }, false);
    const b = await run(without, [3, 4, 5], { temperature: 0, request_output_len: 9 }, false);
    assert.deepEqual(a, b);
    assert.equal(off.stats().greedySearchRuns + without.stats().greedySearchRuns, 0);
    assert.equal(off.hasGreedySearch || without.hasGreedySearch, false);
  });

  test('a request cancelled while its batch runs is counted as cancelled and gets nothing more', async () => {
    const engine = await open(dirs.qwen2);
    const seen: TokenEvent[] = [];
    const subscription = engine.submit({ inputIds: [3, 4, 5], params: { temperature: 0, request_output_len: 200 }, stream: false }).subscribe((e) => seen.push(e));
    const other = run(engine, [6, 7], { temperature: 0, request_output_len: 200 }, false);
    await new Promise((resolve) => setImmediate(resolve));
    subscription.unsubscribe();
    assert.equal((await other).length, 200);
    assert.equal(seen.length, 0);
    assert.equal(engine.stats().requestsCancelled, 1);
    assert.equal(engine.stats().requestsFinished, 1);
    assert.equal(engine.stats().running + engine.stats().waiting, 0);
  });
});
