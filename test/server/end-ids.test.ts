/**
 * A chat with a model whose turn ends at an id only its generation_config.json names (as Phi-3's
 * `<|end|>` and Gemma 2's `<end_of_turn>`), through the official openai client: the answer stops there
 * with finish_reason `stop`, streamed and not. The model is the Llama 3 golden fixture (its tokenizer
 * and chat template), with an end id chosen among the ids its greedy answer goes through.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { buildModel } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { archFixture, readArchGolden } from '../helpers/arch-golden.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

const fixture = archFixture('llama3');
const chat = readArchGolden('llama3')?.tokenizer?.chat;

describe('OpenAI chat over a model with several end ids', { skip: chat === undefined ? `no tokenizer golden at ${fixture}` : false }, () => {
  const root = scratchDir('chorus-end-ids-server-');
  const source = join(root, 'llama3');
  let server: TestServer;
  let openai: OpenAI;
  /** Where the greedy answer first meets the chosen end id: the answer's length, that id included. */
  let answerLength = 0;
  /** The same for the answer's third id, the end_ids of a second model definition over the same files. */
  let definitionLength = 0;

  before(async () => {
    mkdirSync(source);
    for (const name of ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'config.json']) copyFileSync(join(fixture, name), join(source, name));
    // The greedy answer as the model gives it without stopping: its first new id from the fourth on ends the turn.
    const probe = join(root, 'probe');
    buildModel({ source, out: probe });
    const session = await DecoderSession.open(probe);
    const answer = await session.greedy(chat!.ids, 24);
    await session.close();
    const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as { eos_token_id: number[] };
    answerLength = answer.findIndex((id, i) => i >= 3 && !answer.slice(0, i).includes(id) && !config.eos_token_id.includes(id)) + 1;
    assert.ok(answerLength > 3, `an id to end at in ${answer.join(',')}`);
    definitionLength = answer.indexOf(answer[2]!) + 1;
    // generation_config.json's list wins over config.json's.
    writeFileSync(join(source, 'generation_config.json'), JSON.stringify({ eos_token_id: [config.eos_token_id[0], answer[answerLength - 1]] }));
    const repository = join(root, 'repository');
    for (const [folder, text] of [
      ['tokenizers', `type: huggingface\nsource: ${source}\n`],
      ['models', `engine: generate\nsource: ${source}\ntokenizer: llama3\n`],
      ['pipelines', 'model: llama3\nchat_template: tokenizer\n'],
    ] as const) {
      mkdirSync(join(repository, folder), { recursive: true });
      writeFileSync(join(repository, folder, 'llama3.yaml'), text);
    }
    writeFileSync(join(repository, 'models', 'llama3-ids.yaml'), `engine: generate\nsource: ${source}\ntokenizer: llama3\nend_ids: [${answer[2]}]\n`);
    writeFileSync(join(repository, 'pipelines', 'llama3-ids.yaml'), 'model: llama3-ids\nchat_template: tokenizer\n');
    process.env.CHORUS_CACHE = join(root, 'cache');
    server = await startServer(repository);
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  });
  after(async () => {
    await server?.close();
  });

  test('the answer stops at the end id with finish_reason stop', async () => {
    const whole = await openai.chat.completions.create({ model: 'llama3', messages: chat!.messages as OpenAI.ChatCompletionMessageParam[], max_tokens: 24, temperature: 0 });
    assert.equal(whole.choices[0]!.finish_reason, 'stop');
    assert.equal(whole.usage!.completion_tokens, answerLength);
  });

  test("a model definition's end_ids replace the model's", async () => {
    const whole = await openai.chat.completions.create({ model: 'llama3-ids', messages: chat!.messages as OpenAI.ChatCompletionMessageParam[], max_tokens: 24, temperature: 0 });
    assert.equal(whole.choices[0]!.finish_reason, 'stop');
    assert.equal(whole.usage!.completion_tokens, definitionLength);
  });

  test('streamed, the last chunk says stop', async () => {
    const stream = await openai.chat.completions.create({ model: 'llama3', messages: chat!.messages as OpenAI.ChatCompletionMessageParam[], max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const reasons: Array<string | null> = [];
    let tokens = 0;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) reasons.push(choice.finish_reason);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
    }
    assert.equal(reasons.at(-1), 'stop');
    assert.equal(tokens, answerLength);
  });
});
