/**
 * Generated request bodies across the OpenAI, generate and KServe routes, over a small real repository
 * (stories260K, its tokenizer, an ensemble of scripts), sent through fastify's inject. Bodies are built
 * near the real shapes (the fields each route takes, values of every JSON kind, odd numbers, wrong
 * types, missing and extra fields), so that most reach deep into the pipelines. For every answer:
 * nothing is a 5xx, a 4xx (or an error event in a stream) names a field of the body (or a required field
 * it lacks, the body itself, or the model in the path), and
 * after them all the server still answers; no promise was left rejected on the way.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { DATATYPES } from '../../src/config/index.ts';
import { RepositoryClient } from '../../src/serving/index.ts';
import { buildServer, Metrics } from '../../src/server/index.ts';
import { ROOT } from '../helpers/paths.ts';
import { sseData } from '../helpers/server.ts';

const RUNS = 340;
let app: FastifyInstance;
let client: RepositoryClient;
const unhandled: unknown[] = [];
const answered = { ok: 0, refused: 0 };
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);

before(async () => {
  process.on('unhandledRejection', onUnhandled);
  client = RepositoryClient.open(join(ROOT, 'test/fixtures/repositories/ensembles'), { log: () => {} });
  app = await buildServer({ client, metrics: new Metrics(), bodyLimit: 256 * 1024 });
});
after(async () => {
  process.off('unhandledRejection', onUnhandled);
  await app.close();
  await client.close();
});

/** Any JSON value, small. */
const junk = fc.jsonValue({ maxDepth: 2 });
/** Numbers a careless or hostile client sends. */
const oddNumber = fc.oneof(fc.integer({ min: -3, max: 24 }), fc.constantFrom(0, -1, 1e9, -1e9, 2 ** 32, 2 ** 53, 0.5, -0.5, 1e-9, 2.5, 5, -5), fc.double({ noNaN: true, noDefaultInfinity: true }));
const value = fc.oneof({ weight: 4, arbitrary: oddNumber }, { weight: 1, arbitrary: junk }, { weight: 1, arbitrary: fc.string({ maxLength: 12 }) }, { weight: 1, arbitrary: fc.boolean() });
const text = fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('', 'Once upon a time', 'Lily', '\u0000\uffff', 'é🙂'));

const SAMPLING = ['max_tokens', 'temperature', 'top_p', 'top_k', 'seed', 'stop', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'min_tokens', 'beam_width', 'n'];
/** Values inside every sampling field's bounds, so that a share of the bodies generates. */
const plausible = fc.oneof(fc.integer({ min: 1, max: 8 }), fc.double({ min: 0.05, max: 1, noNaN: true }));
const sampled = fc.oneof({ weight: 3, arbitrary: plausible }, { weight: 4, arbitrary: value });
/** Some of `fields`, each with a generated value. */
const someOf = (fields: readonly string[], of: fc.Arbitrary<unknown> = value) => fc.dictionary(fc.constantFrom(...fields), of, { maxKeys: 2 });

const messages = fc.oneof(
  { weight: 5, arbitrary: fc.array(fc.record({ role: fc.constantFrom('user', 'system', 'assistant'), content: text }), { minLength: 1, maxLength: 3 }) },
  { weight: 1, arbitrary: junk },
);
const modelName = fc.oneof({ weight: 6, arbitrary: fc.constant('stories') }, { weight: 1, arbitrary: value });
// Chat bodies carry messages and completion bodies a prompt, mostly; now and then the other's field too.
const openAiBase = fc.oneof(
  { weight: 5, arbitrary: fc.record({ model: modelName, messages }).map((body) => ['/v1/chat/completions', body] as const) },
  { weight: 5, arbitrary: fc.record({ model: modelName, prompt: fc.oneof({ weight: 4, arbitrary: text }, { weight: 1, arbitrary: fc.array(text, { maxLength: 2 }) }, { weight: 1, arbitrary: junk }) }).map((body) => ['/v1/completions', body] as const) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom('/v1/chat/completions', '/v1/completions'), fc.record({ model: modelName, messages, prompt: fc.oneof(text, junk) }, { requiredKeys: ['model'] })) },
);
const openAiBody = fc
  .tuple(openAiBase, someOf([...SAMPLING, 'stream', 'logprobs', 'top_logprobs', 'max_completion_tokens', 'stream_options', 'echo', 'logit_bias', 'user', 'colour'], sampled))
  .map(([[path, base], extra]) => ({ path, body: { ...base, ...extra, max_tokens: extra.max_tokens ?? 4 } as Record<string, unknown> }));

const generateBody = fc.tuple(
  fc.constantFrom('stories', 'story-ensemble', 'diamond', 'nope'),
  fc.constantFrom('generate', 'generate_stream'),
  fc.record({ text_input: fc.oneof({ weight: 5, arbitrary: text }, { weight: 1, arbitrary: value }) }, { requiredKeys: [] }),
  someOf([...SAMPLING, 'text', 'bonus', 'id', 'parameters', 'logprobs', 'messages', 'colour'], sampled),
).map(([model, route, base, extra]) => ({ path: `/v2/models/${model}/${route}`, body: { ...base, ...extra, max_tokens: extra.max_tokens ?? 4 } as Record<string, unknown> }));

const tensorBody = fc.record(
  {
    name: fc.oneof(fc.constantFrom('text', 'bonus', 'prompt', 'length', 'text_input', 'max_tokens', 'temperature'), value),
    datatype: fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...DATATYPES) }, { weight: 1, arbitrary: value }),
    shape: fc.oneof({ weight: 6, arbitrary: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: junk }),
    data: fc.oneof(fc.array(fc.oneof(text, oddNumber, fc.boolean()), { maxLength: 6 }), junk),
  },
  { requiredKeys: ['name'] },
);
/** Tensors close to what the story ensemble takes, to get past the checks. */
const storyInputs = fc.tuple(text, fc.oneof(fc.integer({ min: 1, max: 8 }), oddNumber), fc.option(oddNumber)).map(([prompt, length, temperature]) => [
  { name: 'prompt', datatype: 'BYTES', shape: [1, 1], data: [prompt] },
  { name: 'length', datatype: 'UINT32', shape: [1, 1], data: [length] },
  ...(temperature === null ? [] : [{ name: 'temperature', datatype: 'FP32', shape: [1, 1], data: [temperature] }]),
]);
const inferBody = fc.oneof(
  fc.record({ inputs: storyInputs }).map((body) => ({ path: '/v2/models/story-ensemble/infer', body: body as Record<string, unknown> })),
  fc.tuple(
  fc.constantFrom('stories', 'story-ensemble', 'diamond', 'nope'),
  fc.record({ inputs: fc.oneof({ weight: 8, arbitrary: fc.array(tensorBody, { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: junk }), id: value, outputs: junk, parameters: junk }, { requiredKeys: ['inputs'] }),
).map(([model, body]) => ({ path: `/v2/models/${model}/infer`, body: body as Record<string, unknown> })),
);

/** What a body may lack: a 4xx may name these too (and the body itself). */
const REQUIRED = ['body', 'model', 'messages', 'prompt', 'text_input', 'inputs', 'text', 'length'];

/** Every key and string anywhere in a body: what a 4xx may name. */
function namesIn(body: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(body)) for (const item of body) namesIn(item, out);
  else if (typeof body === 'object' && body !== null) {
    for (const [key, v] of Object.entries(body)) {
      out.add(key);
      namesIn(v, out);
    }
  } else if (typeof body === 'string' && body !== '') out.add(body);
  return out;
}

async function check(path: string, body: Record<string, unknown>): Promise<void> {
  const response = await app.inject({ method: 'POST', url: path, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(body) });
  answered[response.statusCode < 300 ? 'ok' : 'refused']++;
  const label = `${path} ${JSON.stringify(body)} -> ${response.statusCode} ${response.body.slice(0, 300)}`;
  assert.ok(response.statusCode < 500, label);
  // A stream's error comes as an event after the 200: held to the same rules.
  const streamed = String(response.headers['content-type']).startsWith('text/event-stream');
  const errors = streamed
    ? sseData(response.body).filter((data) => data !== '[DONE]').map((data) => JSON.parse(data) as ErrorAnswer).filter((event) => event.error !== undefined)
    : response.statusCode >= 400 ? [JSON.parse(response.body) as ErrorAnswer] : [];
  for (const { error } of errors) {
    const message = typeof error === 'string' ? error : error!.message;
    const param = typeof error === 'string' ? null : error!.param;
    assert.ok(!message.startsWith('internal error'), label);
    const model = path.split('/')[3]!;
    const named = [...namesIn(body), ...REQUIRED, model].some((name) => message.includes(name) || param === name);
    assert.ok(named, `an error names no field of the body: ${label}`);
  }
}

interface ErrorAnswer {
  error?: string | { message: string; param: string | null };
}

const property = (bodies: fc.Arbitrary<{ path: string; body: Record<string, unknown> }>) =>
  // A fresh seed each run (a failure prints its seed; FUZZ_SEED=<seed> replays it).
  fc.assert(fc.asyncProperty(bodies, async ({ path, body }) => check(path, body)), { numRuns: RUNS, ...(process.env.FUZZ_SEED === undefined ? {} : { seed: Number(process.env.FUZZ_SEED) }) });

test(`${RUNS} generated OpenAI bodies: no 5xx, every 4xx names a field`, async () => property(openAiBody));
test(`${RUNS} generated generate bodies: no 5xx, every 4xx names a field`, async () => property(generateBody));
test(`${RUNS} generated KServe infer bodies: no 5xx, every 4xx names a field`, async () => property(inferBody));

test('after them all the server answers, and no promise was left rejected', async () => {
  // The bodies reached the pipelines: a good share of them generated.
  assert.ok(answered.ok + answered.refused >= 1000 && answered.ok >= 0.1 * (answered.ok + answered.refused), JSON.stringify(answered));
  const response = await app.inject({ method: 'POST', url: '/v2/models/stories/generate', payload: { text_input: '', max_tokens: 3, temperature: 0 } });
  assert.equal(response.statusCode, 200, response.body);
  assert.deepEqual(unhandled, []);
});
