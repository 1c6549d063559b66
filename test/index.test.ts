import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as chorus from '../src/index.ts';

test('the package entry point exports the tokenizer layer and the repository loader', async () => {
  const tokenizer = new chorus.TiktokenAdapter({ encoding: 'gpt2' });
  assert.deepEqual(tokenizer.encode('Hello world'), [15496, 995]);
  const { repository } = chorus.loadRepository(chorus.bundledRepositoryDir());
  const gpt2 = repository.tokenizers.get('gpt2')!;
  const opened = await chorus.openTokenizerDefinition('gpt2', gpt2.value, repository.dir);
  assert.equal(opened.decode([15496, 995]), 'Hello world');
});
