/**
 * FasterTransformer's tensor contract through KServe v2, on the bundled FT ensembles with tiny seeded
 * models: output_ids [batch, beam_width, L] INT32 with every beam (the best first), sequence_length,
 * cum_log_probs and output_log_probs per beam, in JSON and in the binary extension; every FT decoding
 * input changes the outputs the way it should; random_seed takes the whole uint64 range exactly.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { tinyFtRepository } from '../helpers/ft-repository.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';

interface WireTensor {
  name: string;
  datatype: string;
  shape: number[];
  data: unknown[];
}
type Inputs = Record<string, [string, unknown]>;

let server: TestServer;
before(async () => {
  server = await startServer(tinyFtRepository());
});
after(async () => {
  await server.close();
});

const PROMPT = [10, 20, 30, 40];

/** KServe JSON tensors from name -> [datatype, one value or a list]; batch 1. */
function wire(inputs: Inputs): WireTensor[] {
  return Object.entries(inputs).map(([name, [datatype, value]]) => {
    const data = Array.isArray(value) ? value : [value];
    return { name, datatype, shape: name.endsWith('_words_list') ? [1, 2, data.length / 2] : [1, data.length], data };
  });
}

/** The request's JSON text; bigints written as exact integer literals, as a Python client writes them. */
function body(inputs: Inputs): string {
  return JSON.stringify({ inputs: wire(inputs) }, (_k, v: unknown) => (typeof v === 'bigint' ? `#${v}#` : v)).replace(/"#(\d+)#"/g, '$1');
}

async function infer(model: string, inputs: Inputs): Promise<Record<string, WireTensor>> {
  const response = await fetch(`${server.url}/v2/models/${model}/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(inputs) });
  const answer = (await response.json()) as { outputs: WireTensor[]; error?: string };
  assert.equal(response.status, 200, answer.error);
  return Object.fromEntries(answer.outputs.map((o) => [o.name, o]));
}

const gpt = (extra: Inputs = {}): Inputs => ({ input_ids: ['UINT32', PROMPT], input_lengths: ['UINT32', 4], request_output_len: ['UINT32', 12], ...extra });
const seq2seq = (extra: Inputs = {}): Inputs => ({ input_ids: ['UINT32', PROMPT], sequence_length: ['UINT32', 4], max_output_len: ['UINT32', 8], ...extra });
const ids = async (model: string, inputs: Inputs): Promise<number[]> => (await infer(model, inputs)).output_ids!.data as number[];
const greedy: Inputs = { runtime_top_k: ['UINT32', 1] };
const sampled: Inputs = { temperature: ['FP32', 1], random_seed: ['UINT64', 5] };

describe('FT-shaped outputs', () => {
  for (const [model, inputs, prompt] of [['fastertransformer', gpt, PROMPT.length], ['t5-fastertransformer', seq2seq, 0], ['bart-fastertransformer', seq2seq, 0]] as const) {
    test(`${model}: beam_width 3 returns 3 beams, INT32, the first the num_return_sequences 1 answer`, async () => {
      const beams = await infer(model, inputs({ beam_width: ['UINT32', 3], is_return_log_probs: ['BOOL', true] }));
      const [batch, width, length] = beams.output_ids!.shape as [number, number, number];
      assert.deepEqual([batch, width], [1, 3]);
      assert.equal(beams.output_ids!.datatype, 'INT32');
      assert.equal(beams.sequence_length!.datatype, 'INT32');
      assert.deepEqual(beams.sequence_length!.shape, [1, 3]);
      assert.deepEqual(beams.cum_log_probs!.shape, [1, 3]);
      const generated = beams.output_log_probs!.shape[2]!;
      assert.deepEqual(beams.output_log_probs!.shape, [1, 3, generated]);
      assert.equal(length, prompt + generated);
      const cum = beams.cum_log_probs!.data as number[];
      const perToken = beams.output_log_probs!.data as number[];
      cum.forEach((c, b) => {
        const count = (beams.sequence_length!.data[b] as number) - prompt;
        const sum = perToken.slice(b * generated, b * generated + count).reduce((x, y) => x + y, 0);
        assert.ok(Math.abs(sum - c) < 1e-3, `beam ${b}: cum_log_probs ${c} is the sum of its output_log_probs ${sum}`);
      });
      const one = await infer(model, inputs({ beam_width: ['UINT32', 3], num_return_sequences: ['UINT32', 1] }));
      assert.deepEqual(one.output_ids!.shape, [1, 1, length]);
      assert.deepEqual(one.output_ids!.data, beams.output_ids!.data.slice(0, length));
      assert.notDeepEqual(beams.output_ids!.data.slice(length, 2 * length), beams.output_ids!.data.slice(0, length), 'the beams differ');
    });
  }

  test('the binary extension carries the same INT32 tensors', async () => {
    const inputs = gpt({ beam_width: ['UINT32', 3] });
    const json = await infer('fastertransformer', inputs);
    const raws: Buffer[] = [];
    const header = {
      inputs: wire(inputs).map(({ name, datatype, shape, data }) => {
        const raw = Buffer.alloc(data.length * 4);
        data.forEach((v, i) => raw.writeUInt32LE(v as number, i * 4));
        raws.push(raw);
        return { name, datatype, shape, parameters: { binary_data_size: raw.length } };
      }),
      parameters: { binary_data_output: true },
    };
    const head = Buffer.from(JSON.stringify(header));
    const response = await fetch(`${server.url}/v2/models/fastertransformer/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(head.length) },
      body: Buffer.concat([head, ...raws]),
    });
    assert.equal(response.status, 200);
    const bytes = Buffer.from(await response.arrayBuffer());
    const length = Number(response.headers.get('inference-header-content-length'));
    const answer = JSON.parse(bytes.subarray(0, length).toString()) as { outputs: Array<{ name: string; datatype: string; shape: number[]; parameters: { binary_data_size: number } }> };
    let at = length;
    for (const output of answer.outputs) {
      const raw = bytes.subarray(at, at + output.parameters.binary_data_size);
      at += raw.length;
      assert.equal(output.datatype, json[output.name]!.datatype);
      assert.deepEqual(output.shape, json[output.name]!.shape);
      assert.deepEqual(Array.from({ length: raw.length / 4 }, (_, i) => raw.readInt32LE(i * 4)), json[output.name]!.data, output.name);
    }
    assert.deepEqual(answer.outputs.map((o) => o.datatype), ['INT32', 'INT32']);
  });
});

describe('every FT decoding input changes the outputs', () => {
  test('sampling inputs: runtime_top_k, runtime_top_p, temperature, random_seed', async () => {
    const free = await ids('fastertransformer', gpt(sampled));
    const top1 = await ids('fastertransformer', gpt({ ...sampled, runtime_top_k: ['UINT32', 1] }));
    assert.notDeepEqual(top1, free);
    assert.deepEqual(top1, await ids('fastertransformer', gpt({ ...sampled, temperature: ['FP32', 0] })), 'top-k 1 is greedy');
    assert.deepEqual(await ids('fastertransformer', gpt({ ...sampled, runtime_top_p: ['FP32', 1e-6] })), top1, 'a tiny nucleus is greedy');
    assert.notDeepEqual(await ids('fastertransformer', gpt({ ...sampled, random_seed: ['UINT64', 6] })), free);
    assert.deepEqual(await ids('fastertransformer', gpt(sampled)), free, 'a seed repeats');
  });

  test('penalties: repetition_penalty, presence_penalty, frequency_penalty', async () => {
    const plain = await ids('fastertransformer', gpt(greedy));
    const generated = plain.slice(PROMPT.length);
    assert.ok(new Set(generated).size < generated.length, `greedy repeats a token here: ${generated.join(' ')}`);
    for (const [field, value] of [['repetition_penalty', 3], ['presence_penalty', 5], ['frequency_penalty', 5]] as const) {
      const penalized = (await ids('fastertransformer', gpt({ ...greedy, [field]: ['FP32', value] }))).slice(PROMPT.length);
      assert.notDeepEqual(penalized, generated, field);
      assert.ok(new Set(penalized).size > new Set(generated).size, `${field}: more distinct tokens (${penalized.join(' ')})`);
    }
  });

  test('end_id, min_length, start_id, bad_words_list, stop_words_list', async () => {
    const plain = (await ids('fastertransformer', gpt(greedy))).slice(PROMPT.length);
    const end = plain[2]!;
    const ended = await infer('fastertransformer', gpt({ ...greedy, end_id: ['UINT32', end] }));
    const stop = plain.indexOf(end) + 1;
    assert.deepEqual(ended.sequence_length!.data, [PROMPT.length + stop], 'generation ends at the end id');
    const held = await infer('fastertransformer', gpt({ ...greedy, end_id: ['UINT32', end], min_length: ['UINT32', 6] }));
    assert.ok((held.sequence_length!.data[0] as number) >= PROMPT.length + 6, 'min_length holds the end id back');
    const stopped = await infer('fastertransformer', gpt({ ...greedy, stop_words_list: ['INT32', [plain[1]!, 1]] }));
    assert.deepEqual(stopped.sequence_length!.data, [PROMPT.length + plain.indexOf(plain[1]!) + 1], 'a stop word ends it');
    const banned = (await ids('fastertransformer', gpt({ ...greedy, bad_words_list: ['INT32', [plain[0]!, 1]] }))).slice(PROMPT.length);
    assert.ok(!banned.includes(plain[0]!), 'a bad word never comes');
    const fromStart = async (start: number): Promise<number[]> => ids('fastertransformer', { input_ids: ['UINT32', [0]], input_lengths: ['UINT32', 0], request_output_len: ['UINT32', 4], ...greedy, start_id: ['UINT32', start] });
    assert.notDeepEqual(await fromStart(3), await fromStart(4), 'start_id is what an empty prompt starts from');
  });

  test('beam inputs: beam_width, beam_search_diversity_rate, len_penalty', async () => {
    const beams = await ids('fastertransformer', gpt({ beam_width: ['UINT32', 3] }));
    assert.notDeepEqual(beams.slice(0, 16), await ids('fastertransformer', gpt(greedy)));
    assert.notDeepEqual(await ids('fastertransformer', gpt({ beam_width: ['UINT32', 3], beam_search_diversity_rate: ['FP32', 5] })), beams);
    // len_penalty ranks beams of different lengths: end them at a token some beam reaches early.
    const changed: number[] = [];
    for (const end of new Set(beams.filter((_, i) => i % 16 >= PROMPT.length))) {
      const rank = async (penalty: number): Promise<number[]> => ids('fastertransformer', gpt({ beam_width: ['UINT32', 3], end_id: ['UINT32', end], len_penalty: ['FP32', penalty] }));
      if (JSON.stringify(await rank(0)) !== JSON.stringify(await rank(3))) changed.push(end);
    }
    assert.ok(changed.length > 0, 'some end id makes len_penalty reorder the beams');
  });

  test('factual nucleus: top_p_decay, top_p_min, top_p_reset_ids', async () => {
    const nucleus: Inputs = { ...sampled, runtime_top_p: ['FP32', 0.9] };
    const plain = await ids('fastertransformer', gpt(nucleus));
    const decayed = await ids('fastertransformer', gpt({ ...nucleus, top_p_decay: ['FP32', 0.01] }));
    assert.notDeepEqual(decayed, plain);
    const floored = await ids('fastertransformer', gpt({ ...nucleus, top_p_decay: ['FP32', 0.01], top_p_min: ['FP32', 0.9] }));
    assert.deepEqual(floored, plain, 'top_p_min 0.9 keeps the nucleus at 0.9');
    const reset = await ids('fastertransformer', gpt({ ...nucleus, top_p_decay: ['FP32', 0.01], top_p_reset_ids: ['UINT32', decayed[PROMPT.length]!] }));
    assert.notDeepEqual(reset, decayed, 'generating a reset id restores top_p');
  });

  test('encoder-decoder ensembles take the same inputs', async () => {
    for (const model of ['t5-fastertransformer', 'bart-fastertransformer']) {
      const plain = await infer(model, seq2seq({ ...sampled, runtime_top_p: ['FP32', 0.9] }));
      const decayed = await infer(model, seq2seq({ ...sampled, runtime_top_p: ['FP32', 0.9], top_p_decay: ['FP32', 0.01] }));
      assert.notDeepEqual(decayed.output_ids!.data, plain.output_ids!.data, `${model}: top_p_decay`);
      const greedyIds = (await infer(model, seq2seq(greedy))).output_ids!.data as number[];
      const end = greedyIds[3]!;
      const short = await infer(model, seq2seq({ ...greedy, end_id: ['UINT32', end] }));
      const long = await infer(model, seq2seq({ ...greedy, end_id: ['UINT32', end], min_length: ['UINT32', 5] }));
      assert.ok((long.sequence_length!.data[0] as number) > (short.sequence_length!.data[0] as number), `${model}: min_length`);
      const penalized = await infer(model, seq2seq({ ...greedy, presence_penalty: ['FP32', 50] }));
      const penalizedIds = (penalized.output_ids!.data as number[]).slice(0, penalized.sequence_length!.data[0] as number);
      assert.equal(new Set(penalizedIds).size, penalizedIds.length, `${model}: presence_penalty 50 repeats no token`);
    }
  });
});

describe('random_seed over the whole uint64 range', () => {
  const top = 18446744073709551615n;
  test('seeds beyond 2^53 are exact in JSON and binary, and deterministic', async () => {
    const jsonTop = await ids('fastertransformer', gpt({ ...sampled, random_seed: ['UINT64', top] }));
    const jsonBelow = await ids('fastertransformer', gpt({ ...sampled, random_seed: ['UINT64', top - 1n] }));
    assert.notDeepEqual(jsonTop, jsonBelow, 'two seeds JSON.parse would round alike draw differently');
    assert.deepEqual(await ids('fastertransformer', gpt({ ...sampled, random_seed: ['UINT64', top] })), jsonTop);
    const raw = Buffer.alloc(8);
    raw.writeBigUInt64LE(top - 1n);
    const inputs = wire(gpt({ ...sampled })).filter((t) => t.name !== 'random_seed');
    const header = Buffer.from(JSON.stringify({ inputs: [...inputs, { name: 'random_seed', datatype: 'UINT64', shape: [1, 1], parameters: { binary_data_size: 8 } }] }));
    const response = await fetch(`${server.url}/v2/models/fastertransformer/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
      body: Buffer.concat([header, raw]),
    });
    const answer = (await response.json()) as { outputs: WireTensor[] };
    assert.deepEqual(answer.outputs.find((o) => o.name === 'output_ids')!.data, jsonBelow, 'the binary seed draws as the JSON one');
    const refused = await fetch(`${server.url}/v2/models/fastertransformer/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(gpt({ random_seed: ['UINT64', top + 1n] })) });
    assert.equal(refused.status, 400);
    assert.match(((await refused.json()) as { error: string }).error, /random_seed\)\.data\[0\] must be an exact integer in \[0, 18446744073709551615\]/);
  });
});
