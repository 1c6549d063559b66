/** Malformed requests across the three protocols: each a 4xx naming what is wrong, and the server goes on. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

let server: TestServer;
before(async () => {
  server = await startServer(join(ROOT, 'test/fixtures/repositories/ensembles'), { bodyLimit: 64 * 1024 });
});
after(async () => {
  await server.close();
});

type Case = [label: string, path: string, body: unknown, status: number, message: RegExp];
const text = (data: unknown[]) => ({ name: 'prompt', datatype: 'BYTES', shape: [1, 1], data });
const length = { name: 'length', datatype: 'UINT32', shape: [1, 1], data: [4] };
const chat = (extra: Record<string, unknown>) => ({ model: 'stories', messages: [{ role: 'user', content: 'hi' }], ...extra });
const completion = (extra: Record<string, unknown>) => ({ model: 'stories', prompt: 'hi', ...extra });

const CASES: Case[] = [
  // KServe infer
  ['infer: unknown model', '/v2/models/nope/infer', { inputs: [length] }, 404, /unknown model nope; there are: /],
  ['infer: body not an object', '/v2/models/stories/infer', [1, 2], 400, /^body must be a JSON object with inputs/],
  ['infer: no inputs', '/v2/models/stories/infer', {}, 400, /^inputs must be a non-empty list of tensors, got nothing/],
  ['infer: empty inputs', '/v2/models/stories/infer', { inputs: [] }, 400, /^inputs must be a non-empty list/],
  ['infer: input not an object', '/v2/models/stories/infer', { inputs: [3] }, 400, /^inputs\[0\] must be a tensor/],
  ['infer: input without a name', '/v2/models/stories/infer', { inputs: [{ datatype: 'UINT32', shape: [1], data: [1] }] }, 400, /^inputs\[0\]\.name must be a non-empty string/],
  ['infer: unknown datatype', '/v2/models/stories/infer', { inputs: [{ ...length, datatype: 'UINT31' }] }, 400, /^inputs\[0\] \(length\)\.datatype must be one of BOOL/],
  ['infer: negative shape', '/v2/models/stories/infer', { inputs: [{ ...length, shape: [-1] }] }, 400, /\.shape must be a list of non-negative integers/],
  ['infer: shape and data disagree', '/v2/models/stories/infer', { inputs: [{ ...length, shape: [2, 1] }] }, 400, /\.data must hold 2 elements for shape \[2, 1\], got 1$/],
  ['infer: wrong element type', '/v2/models/stories/infer', { inputs: [{ ...length, data: ['four'] }] }, 400, /\.data\[0\] must be an integer in \[0, 4294967295\] \(UINT32\), got "four"/],
  ['infer: number out of range', '/v2/models/stories/infer', { inputs: [{ ...length, data: [-4] }] }, 400, /must be an integer in \[0, 4294967295\] \(UINT32\), got -4/],
  ['infer: no data', '/v2/models/stories/infer', { inputs: [{ name: 'length', datatype: 'UINT32', shape: [1, 1] }] }, 400, /\.data must be the tensor's elements/],
  ['infer: duplicate input', '/v2/models/story-ensemble/infer', { inputs: [length, length] }, 400, /inputs must be tensors of different names/],
  ['infer: pipeline without text_input', '/v2/models/story-ensemble/infer', { inputs: [length] }, 400, /inputs\.text_input must be one BYTES element/],
  ['infer: ensemble input missing', '/v2/models/diamond/infer', { inputs: [{ name: 'bonus', datatype: 'INT32', shape: [1, 1], data: [1] }] }, 400, /input text is required by ensemble diamond/],
  ['infer: unknown ensemble input', '/v2/models/diamond/infer', { inputs: [{ name: 'txt', datatype: 'BYTES', shape: [1, 1], data: ['a'] }] }, 400, /ensemble diamond has no input txt/],
  ['infer: datatype unlike the ensemble', '/v2/models/diamond/infer', { inputs: [{ name: 'text', datatype: 'INT32', shape: [1, 1], data: [1] }] }, 400, /input text must be BYTES, got INT32/],
  ['infer: unknown output asked', '/v2/models/diamond/infer', { inputs: [{ name: 'text', datatype: 'BYTES', shape: [1, 1], data: ['a'] }], outputs: [{ name: 'nope' }] }, 400, /outputs must be names of outputs of diamond \(total\), got "nope"/],
  ['infer: shape unlike the ensemble', '/v2/models/stories/infer', { inputs: [{ ...text(['x', 'y']), shape: [1, 2] }, length] }, 400, /^inputs\[0\] \(prompt\)\.shape must be \[-1, 1\] or \[1\] without the batch dimension \(-1: any size\), got \[1, 2\]$/],
  ['infer: binary size without a binary body', '/v2/models/diamond/infer', { inputs: [{ name: 'text', datatype: 'BYTES', shape: [1, 1], parameters: { binary_data_size: 4 } }] }, 400, /binary_data_size must be used only with a binary body/],
  ['infer: id not a string', '/v2/models/diamond/infer', { id: 7, inputs: [{ name: 'text', datatype: 'BYTES', shape: [1, 1], data: ['a'] }] }, 400, /^id must be a string, got 7/],
  ['infer: invalid JSON', '/v2/models/diamond/infer', '{"inputs": [', 400, /^body must be valid JSON/],
  ['infer: body too large', '/v2/models/diamond/infer', { inputs: [text(['x'.repeat(70 * 1024)])] }, 413, /^the body must be at most \d+ bytes \(the server's body limit\)$/],
  // generate extension
  ['generate: unknown model', '/v2/models/nope/generate', { text_input: 'x' }, 404, /unknown model nope; generate serves pipelines and ensembles/],
  ['generate: no text_input', '/v2/models/stories/generate', { max_tokens: 3 }, 400, /^text_input must be a string \(or give messages\), got nothing/],
  ['generate: text_input a number', '/v2/models/stories/generate', { text_input: 5 }, 400, /^text_input must be a string/],
  ['generate: unknown field', '/v2/models/stories/generate', { text_input: 'x', colour: 'red' }, 400, /pipeline stories takes no field colour/],
  ['generate: parameters not an object', '/v2/models/stories/generate', { text_input: 'x', parameters: 3 }, 400, /^parameters must be an object of fields, got 3/],
  ['generate: max_tokens negative', '/v2/models/stories/generate', { text_input: 'x', max_tokens: -2 }, 400, /^max_tokens must be an integer >= 1, got -2/],
  ['generate: max_tokens too many', '/v2/models/stories/generate', { text_input: 'x', max_tokens: 100000 }, 400, /max_tokens 100000 is more than the \d+ tokens model stories has room for after a prompt of \d+/],
  ['generate: temperature a string', '/v2/models/stories/generate', { text_input: 'x', parameters: { temperature: 'hot' } }, 400, /^parameters\.temperature must be a number >= 0, got "hot"/],
  ['generate: top_p out of range', '/v2/models/stories/generate', { text_input: 'x', top_p: 2 }, 400, /^top_p must be a number in \(0, 1\], got 2/],
  ['generate: top_k with beams', '/v2/models/stories/generate', { text_input: 'x', top_k: 5, beam_width: 2 }, 400, /^step generate: top_k 5 has no effect with beam_width 2/],
  ['generate: empty stop', '/v2/models/stories/generate', { text_input: 'x', stop: [''] }, 400, /^stop\[0\] must be a non-empty string, got ""$/],
  ['generate: ensemble input of wrong type', '/v2/models/diamond/generate', { text: 'x', bonus: 'many' }, 400, /bonus\.data\[0\] must be an integer/],
  // OpenAI
  ['openai: no model', '/v1/completions', { prompt: 'x' }, 400, /^model must be the name of a model/],
  ['openai: unknown model', '/v1/chat/completions', chat({ model: 'nope' }), 404, /The model `nope` does not exist/],
  ['openai: no messages', '/v1/chat/completions', { model: 'stories' }, 400, /^messages must be a non-empty list of messages/],
  ['openai: message without role', '/v1/chat/completions', { model: 'stories', messages: [{ content: 'hi' }] }, 400, /^messages\[0\]\.role must be one of system, developer, user, assistant, tool, got nothing$/],
  ['openai: content not text', '/v1/chat/completions', { model: 'stories', messages: [{ role: 'user', content: 3 }] }, 400, /^messages\[0\]\.content must be a string/],
  ['openai: image part', '/v1/chat/completions', { model: 'stories', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, /content\[0\] must be a text part/],
  ['openai: prompt a number', '/v1/completions', completion({ prompt: 5 }), 400, /^prompt must be a string or a non-empty list of strings/],
  ['openai: n zero', '/v1/completions', completion({ n: 0 }), 400, /^n must be an integer in \[1, 16\], got 0/],
  ['openai: stream not boolean', '/v1/completions', completion({ stream: 'yes' }), 400, /^stream must be true or false/],
  ['openai: unknown argument', '/v1/completions', completion({ temprature: 1 }), 400, /Unrecognized request argument supplied: temprature/],
  ['openai: logprobs out of range', '/v1/completions', completion({ logprobs: 9 }), 400, /^logprobs must be an integer in \[0, 5\], got 9/],
  ['openai: top_logprobs without logprobs', '/v1/chat/completions', chat({ top_logprobs: 2 }), 400, /^top_logprobs must be used with logprobs: true, got 2/],
  ['openai: logit_bias', '/v1/completions', completion({ logit_bias: { 5: 1 } }), 400, /logit_bias is not supported by this server/],
  ['openai: temperature negative', '/v1/chat/completions', chat({ temperature: -1 }), 400, /^temperature must be a number in \[0, 2\], got -1/],
  ['openai: presence_penalty a string', '/v1/chat/completions', chat({ presence_penalty: 'x' }), 400, /^presence_penalty must be a number in \[-2, 2\], got "x"/],
  ['openai: stream_options a string', '/v1/chat/completions', chat({ stream_options: 'x' }), 400, /^stream_options must be an object/],
  ['openai: invalid JSON', '/v1/chat/completions', '{', 400, /^body must be valid JSON/],
  ['route: unknown', '/v3/nothing', {}, 404, /no route POST \/v3\/nothing/],
];

test(`${CASES.length} malformed requests each get the right 4xx and a message naming what is wrong; the server still answers`, async () => {
  assert.ok(CASES.length >= 40);
  for (const [label, path, body, status, message] of CASES) {
    const response = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    const answer = (await response.json()) as { error: string | { message: string; type: string } };
    const text = typeof answer.error === 'string' ? answer.error : answer.error.message;
    assert.equal(response.status, status, `${label}: ${text}`);
    assert.match(text, message, label);
    if (path.startsWith('/v1/')) assert.equal(typeof answer.error, 'object', `${label}: OpenAI's error shape`);
  }
  const ok = await fetch(`${server.url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text_input: '', max_tokens: 3, temperature: 0 }) });
  assert.equal(ok.status, 200);
});

test('invalid UTF-8 in a binary BYTES tensor is a 400 naming the input', async () => {
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'text', datatype: 'BYTES', shape: [1, 1], parameters: { binary_data_size: 6 } }] }));
  const raw = Buffer.from([2, 0, 0, 0, 0xc3, 0x28]);
  const response = await fetch(`${server.url}/v2/models/diamond/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    body: Buffer.concat([header, raw]),
  });
  assert.equal(response.status, 400);
  assert.deepEqual(await response.json(), { error: 'text must be valid UTF-8' });
});
