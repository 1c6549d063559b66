/**
 * Llama 3's tokenizer.json (byte-level BPE with Llama 3's split regex) and the chat template of its
 * tokenizer_config.json, through the tokenizer and a model pipeline, against transformers' golden
 * (test/fixtures/arch/llama3: its texts' ids, and a chat rendered and tokenized).
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { buildModel } from '../../src/modelbuild/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { openTokenizerPath } from '../../src/tokenizers/index.ts';
import { archFixture, readArchGolden } from '../helpers/arch-golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const fixture = archFixture('llama3');
const golden = readArchGolden('llama3')?.tokenizer;

describe("Llama 3's tokenizer and chat template", { skip: golden === undefined ? `no tokenizer golden at ${fixture}` : false }, () => {
  const root = scratchDir('chorus-llama3-chat-');
  let service: Service;
  before(() => {
    for (const [folder, text] of [
      ['tokenizers', `type: huggingface\nsource: ${fixture}\n`],
      ['models', `engine: generate\nsource: ${fixture}\ntokenizer: llama3\n`],
      ['pipelines', 'model: llama3\nchat_template: tokenizer\n'],
    ] as const) {
      mkdirSync(join(root, 'repository', folder), { recursive: true });
      writeFileSync(join(root, 'repository', folder, 'llama3.yaml'), text);
    }
    process.env.CHORUS_CACHE = join(root, 'cache');
    service = Service.open(join(root, 'repository'), { log: () => {} });
  });
  after(async () => {
    await service?.close();
  });

  test("encodes transformers' texts to its ids (BOS first), and decodes them back", async () => {
    const tokenizer = await openTokenizerPath(fixture);
    golden!.texts.forEach((text, i) => {
      assert.deepEqual(tokenizer.encode(text), golden!.ids[i], text);
      assert.equal(tokenizer.decode(golden!.ids[i]!, { skipSpecialTokens: true }), text);
    });
  });

  test("a chat renders through tokenizer_config.json's template to transformers' ids, and the pipeline continues them", async () => {
    const chat = golden!.chat;
    const tokenizer = await openTokenizerPath(fixture);
    assert.deepEqual(tokenizer.encode(chat.rendered, { addSpecialTokens: false }), chat.ids);
    const answer = (await lastValueFrom(service.pipeline('llama3').run({ messages: chat.messages, max_tokens: 6, temperature: 0 }).pipe(toArray()))).at(-1)!;
    assert.deepEqual(answer.usage, { promptTokens: chat.ids.length, completionTokens: 6 });
    // The same ids straight into the built model give the same continuation.
    const built = join(root, 'built');
    buildModel({ source: fixture, out: built });
    const session = await DecoderSession.open(built);
    const continuation = await session.greedy(chat.ids, 6);
    await session.close();
    assert.equal(answer.choices[0]!.text, tokenizer.decode(continuation, { skipSpecialTokens: true }));
  });
});
