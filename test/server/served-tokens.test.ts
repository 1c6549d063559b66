/**
 * Every token an engine makes reaches the client, in order: the server over a stand-in engine (GPT-2
 * ids of news text, a step every 2 ms for 16 streams at once), read back over HTTP through the OpenAI
 * chat SSE route and Triton's generate_stream, against the engine's own tokens decoded.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { filter, firstValueFrom, Subject } from 'rxjs';
import { Service } from '../../src/pipeline/index.ts';
import { buildServer, Metrics } from '../../src/server/index.ts';
import { RepositoryClient, type RequestDone } from '../../src/serving/index.ts';
import { TiktokenAdapter } from '../../src/tokenizers/index.ts';
import { sseData } from '../helpers/server.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { StandInEngine, standInRepository, standInTokens } from '../helpers/stand-in-engine.ts';

const tokenizer = new TiktokenAdapter({ encoding: 'gpt2' });
// Text with multi-byte characters split over byte-level ids, so that held-back pieces are crossed.
const ids = tokenizer.encode('Café crème at 9 — naïve résumé: 你好, 世界! 🙂 The quick brown fox jumps over the lazy dog. '.repeat(12));
const STREAMS = 16;
const NEW = 48;
let url: string;
let client: RepositoryClient;
let close: () => Promise<void>;

before(async () => {
  const done = new Subject<RequestDone>();
  const service = Service.open(standInRepository(scratchDir('chorus-stand-in-'), STREAMS), {
    log: () => {},
    onRequestDone: (model, metrics) => done.next({ model, metrics }),
    engine: (_name, _definition, onRequestDone) => new StandInEngine({ ids, vocabSize: tokenizer.vocabSize, endId: tokenizer.specialTokens.eos, stepMs: 2, maxBatchSize: STREAMS, onRequestDone }),
  });
  client = new RepositoryClient(service, done);
  const app = await buildServer({ client, metrics: new Metrics() });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
  close = async () => {
    await app.close();
    await client.close();
  };
});
after(() => close());

const post = async (path: string, body: unknown): Promise<string[]> => {
  const response = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(response.status, 200);
  return sseData(await response.text());
};

/** What the engine generates for a prompt and seed, as text. */
const expected = (prompt: string, seed: number): string => tokenizer.decode(standInTokens(ids, tokenizer.encode(prompt), seed, NEW), { skipSpecialTokens: true });

test(`${STREAMS} concurrent chat SSE streams each get every token, in order, and the usage counts them`, async () => {
  const answers = await Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      const content = `Request ${i}: tell me the news.`;
      const events = await post('/v1/chat/completions', { model: 'stand-in', messages: [{ role: 'user', content }], max_tokens: NEW, seed: i, temperature: 0.7, stream: true, stream_options: { include_usage: true } });
      assert.equal(events.at(-1), '[DONE]');
      const chunks = events.slice(0, -1).map((data) => JSON.parse(data) as { choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null }>; usage?: { completion_tokens: number } });
      assert.equal(chunks[0]!.choices[0]!.delta.role, 'assistant');
      const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
      return { text, want: expected(`${content}\n`, i), finish: chunks.at(-2)!.choices[0]!.finish_reason, usage: chunks.at(-1)!.usage };
    }),
  );
  for (const answer of answers) {
    assert.equal(answer.text, answer.want);
    assert.equal(answer.finish, 'length');
    assert.equal(answer.usage?.completion_tokens, NEW);
  }
});

test(`${STREAMS} concurrent generate_stream streams each get every token, in order, the last event with usage`, async () => {
  const answers = await Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      const prompt = `Prompt number ${i}`;
      const events = (await post('/v2/models/stand-in/generate_stream', { text_input: prompt, max_tokens: NEW, seed: 100 + i })).map((data) => JSON.parse(data) as { model_name: string; text_output: string; finish_reason?: string; usage?: { completion_tokens: number } });
      assert.ok(events.every((e) => e.model_name === 'stand-in'));
      return { text: events.map((e) => e.text_output).join(''), want: expected(prompt, 100 + i), last: events.at(-1)! };
    }),
  );
  for (const { text, want, last } of answers) {
    assert.equal(text, want);
    assert.equal(last.finish_reason, 'length');
    assert.equal(last.usage?.completion_tokens, NEW);
  }
});

test(`${STREAMS} concurrent requests not streamed each answer the engine's whole text`, async () => {
  const answers = await Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      const response = await fetch(`${url}/v2/models/stand-in/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: `Whole ${i}`, max_tokens: NEW, seed: 200 + i }) });
      return { body: (await response.json()) as { text_output: string; finish_reason: string; usage: { completion_tokens: number } }, want: expected(`Whole ${i}`, 200 + i) };
    }),
  );
  for (const { body, want } of answers) {
    assert.equal(body.text_output, want);
    assert.equal(body.finish_reason, 'length');
    assert.equal(body.usage.completion_tokens, NEW);
  }
});

test('a stop string ends the stream before it, and the engine stops the request', async () => {
  const prompt = 'Stop early';
  const full = expected(prompt, 7);
  const stop = full.slice(20, 26);
  const left = firstValueFrom(client.requestsDone.pipe(filter((d) => d.metrics.finishReason === 'cancelled')));
  const events = (await post('/v2/models/stand-in/generate_stream', { text_input: prompt, max_tokens: NEW, seed: 7, stop: [stop] })).map((data) => JSON.parse(data) as { text_output: string; finish_reason?: string });
  assert.equal(events.map((e) => e.text_output).join(''), full.slice(0, full.indexOf(stop)));
  assert.equal(events.at(-1)!.finish_reason, 'stop');
  // It leaves the engine at its next step, well short of its length.
  assert.ok((await left).metrics.tokens < NEW);
});
