/**
 * Tokenizer threads (TokenizerPool, ModelStore's tokenizerThreads): long texts encoded on a thread give
 * the ids the tokenizer gives in place, for a tiktoken and a SentencePiece tokenizer; short texts stay in
 * place; a thread that cannot open its tokenizer is said and leaves its texts in place; closing ends the threads.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom } from 'rxjs';
import { ModelStore } from '../../src/ensemble/index.ts';
import { loadRepository, POOL_MIN_CHARS, TokenizerPool } from '../../src/repository/index.ts';
import { RepositoryClient } from '../../src/serving/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const SHARED = join(ROOT, '../shared');

function repository(): string {
  const dir = scratchDir('chorus-tokenizer-pool-');
  mkdirSync(join(dir, 'tokenizers'), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/gpt2.yaml'), 'type: tiktoken\nencoding: gpt2\n');
  writeFileSync(join(dir, 'tokenizers/llama.yaml'), `type: sentencepiece\nsource: ${join(SHARED, 'tokenizers/llama2-32k/tokenizer.model')}\nadd_bos: true\n`);
  return dir;
}

const long = 'The quick brown fox jumps over the lazy dog, and <|endoftext|> then naïve café — 東京 🚀. '.repeat(8);

test('long texts encoded on the threads are the ids encoded in place; short ones stay in place', async () => {
  assert.ok(long.length >= POOL_MIN_CHARS);
  const store = new ModelStore(loadRepository(repository()).repository, { tokenizerThreads: 2, log: () => {} });
  try {
    for (const name of ['gpt2', 'llama']) {
      const tokenizer = await store.tokenizer(name);
      assert.ok(tokenizer.encodeOffThread !== undefined, `${name} has threads`);
      // The threads start in the background: until one is ready, texts are encoded in place (the same ids).
      for (let i = 0; i < 50; i++) {
        assert.deepEqual(await tokenizer.encodeOffThread(long), tokenizer.encode(long));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const texts = Array.from({ length: 40 }, (_, i) => `${i}: ${long}`);
      assert.deepEqual(await Promise.all(texts.map((t) => tokenizer.encodeOffThread!(t, { addSpecialTokens: false }))), texts.map((t) => tokenizer.encode(t, { addSpecialTokens: false })));
      assert.deepEqual(await tokenizer.encodeOffThread('short'), tokenizer.encode('short'));
    }
  } finally {
    await store.close();
  }
});

test('the threads answer and close ends them; a thread that cannot open its tokenizer is said, and texts go on in place', async () => {
  const dir = repository();
  const definition = loadRepository(dir).repository.tokenizers.get('gpt2')!.value;
  const store = new ModelStore(loadRepository(dir).repository, { log: () => {} });
  const inPlace = await store.tokenizer('gpt2');
  const pool = new TokenizerPool(1, { name: 'gpt2', definition, repositoryDir: dir }, () => {});
  for (let i = 0; i < 100 && pool.ready === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(pool.ready, 1);
  assert.deepEqual(await pool.encode(long, undefined, inPlace), inPlace.encode(long));
  await pool.close();
  assert.equal(pool.ready, 0);
  // Closed: texts are encoded in place.
  assert.deepEqual(await pool.encode(long, undefined, inPlace), inPlace.encode(long));
  const said: string[] = [];
  const broken = new TokenizerPool(1, { name: 'gone', definition: { type: 'sentencepiece', source: join(dir, 'missing.model') }, repositoryDir: dir }, (line) => said.push(line));
  for (let i = 0; i < 100 && said.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.match(said.join('\n'), /tokenizer gone: a tokenizer thread stopped \(.*missing\.model/);
  assert.equal(broken.ready, 0);
  assert.deepEqual(await broken.encode(long, undefined, inPlace), inPlace.encode(long));
  await broken.close();
  await store.close();
});

test('a pipeline over tokenizer threads answers a long prompt as one without them', async () => {
  const dir = scratchDir('chorus-tokenizer-pool-stories-');
  for (const kind of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, kind), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\nsource: ${STORIES}/stories260K.bin\ntokenizer: stories\n`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\n');
  const prompt = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. '.repeat(3);
  const answers: string[] = [];
  for (const tokenizerThreads of [0, 1]) {
    const client = RepositoryClient.open(dir, { log: () => {}, tokenizerThreads });
    try {
      // Twice: the first may be encoded in place while the thread starts.
      for (let i = 0; i < 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        const last = await lastValueFrom(client.generate('stories', { text_input: prompt, max_tokens: 24, temperature: 0 }));
        answers.push(`${last.usage?.promptTokens}: ${last.choices[0]!.text}`);
      }
    } finally {
      await client.close();
    }
  }
  assert.equal(new Set(answers).size, 1, answers.join('\n'));
  assert.match(answers[0]!, /^\d+: [\s\S]*\w/);
});
