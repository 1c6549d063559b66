/**
 * KServe v2 against the bundled repository offline (GPT-2 on its fallback weights): an
 * end_to_end_test-style request to the gpt ensemble, in JSON and in the binary tensor extension (encoded
 * and decoded here from the extension's spec), metadata, readiness and the repository API.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { bundledRepositoryDir } from '../../src/repository/index.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';
let server: TestServer;

before(async () => {
  server = await startServer(bundledRepositoryDir());
});
after(async () => {
  await server.close();
});

const PROMPTS = ['The quick brown fox', 'Hello world', 'In the beginning', 'Once upon a time', 'The weather today', 'My favourite food', 'Machine learning is', 'The capital of France'];
const column = <T>(values: T[]) => values.map((v) => [v]);

/** FT's end_to_end_test inputs: prompts, output length 24, bad words on row 0, stop words on row 7, scalars as [8, 1]. */
function inputs() {
  return [
    { name: 'INPUT_0', datatype: 'BYTES', shape: [8, 1], data: column(PROMPTS) },
    { name: 'INPUT_1', datatype: 'UINT32', shape: [8, 1], data: column(PROMPTS.map(() => 24)) },
    { name: 'INPUT_2', datatype: 'BYTES', shape: [8, 1], data: column(PROMPTS.map((_, i) => (i === 0 ? 'Hawks, Hawks' : ''))) },
    { name: 'INPUT_3', datatype: 'BYTES', shape: [8, 1], data: column(PROMPTS.map((_, i) => (i === 7 ? 'Paris, London' : ''))) },
    { name: 'runtime_top_k', datatype: 'UINT32', shape: [8, 1], data: column(PROMPTS.map(() => 1)) },
    { name: 'random_seed', datatype: 'UINT64', shape: [8, 1], data: column(PROMPTS.map((_, i) => i)) },
    { name: 'temperature', datatype: 'FP32', shape: [8, 1], data: column(PROMPTS.map(() => 1)) },
  ];
}

// The binary tensor extension, from its specification: little-endian raw tensors after a JSON header.
function rawOf(datatype: string, values: unknown[]): Buffer {
  if (datatype === 'BYTES') {
    return Buffer.concat(
      values.map((v) => {
        const text = Buffer.from(String(v));
        const size = Buffer.alloc(4);
        size.writeUInt32LE(text.length);
        return Buffer.concat([size, text]);
      }),
    );
  }
  const width = { UINT32: 4, UINT64: 8, FP32: 4 }[datatype]!;
  const out = Buffer.alloc(values.length * width);
  values.forEach((v, i) => {
    if (datatype === 'UINT32') out.writeUInt32LE(v as number, i * 4);
    else if (datatype === 'UINT64') out.writeBigUInt64LE(BigInt(v as number), i * 8);
    else out.writeFloatLE(v as number, i * 4);
  });
  return out;
}

function valuesOf(datatype: string, raw: Buffer): unknown[] {
  const out: unknown[] = [];
  if (datatype === 'BYTES') {
    for (let at = 0; at < raw.length; ) {
      const size = raw.readUInt32LE(at);
      out.push(raw.subarray(at + 4, at + 4 + size).toString());
      at += 4 + size;
    }
  } else for (let at = 0; at < raw.length; at += 4) out.push(raw.readUInt32LE(at));
  return out;
}

test('an end_to_end_test-style request to the gpt ensemble answers every row, in JSON', async () => {
  const response = await fetch(`${server.url}/v2/models/gpt/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'e2e', inputs: inputs() }) });
  assert.equal(response.status, 200);
  const body = (await response.json()) as { id: string; model_name: string; outputs: Array<{ name: string; shape: number[]; data: unknown[] }> };
  assert.equal(body.id, 'e2e');
  assert.equal(body.model_name, 'gpt');
  const output = body.outputs.find((o) => o.name === 'OUTPUT_0')!;
  const lengths = body.outputs.find((o) => o.name === 'sequence_length')!;
  assert.deepEqual(output.shape, [8, 1]);
  assert.deepEqual(lengths.shape, [8, 1]);
  output.data.forEach((text, i) => assert.ok((text as string).startsWith(PROMPTS[i]!), String(text)));
  (lengths.data as number[]).forEach((n) => assert.ok(n > 2 && n <= 40));
});

test('the same request in the binary tensor extension gives the same outputs', async () => {
  const json = await (await fetch(`${server.url}/v2/models/gpt/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs: inputs() }) })).json();
  const raws: Buffer[] = [];
  const header = {
    inputs: inputs().map(({ name, datatype, shape, data }) => {
      const raw = rawOf(datatype, data.flat());
      raws.push(raw);
      return { name, datatype, shape, parameters: { binary_data_size: raw.length } };
    }),
    outputs: [{ name: 'OUTPUT_0', parameters: { binary_data: true } }, { name: 'sequence_length', parameters: { binary_data: true } }],
  };
  const headerBytes = Buffer.from(JSON.stringify(header));
  const response = await fetch(`${server.url}/v2/models/gpt/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(headerBytes.length) },
    body: Buffer.concat([headerBytes, ...raws]),
  });
  assert.equal(response.status, 200);
  const length = Number(response.headers.get('inference-header-content-length'));
  const bytes = Buffer.from(await response.arrayBuffer());
  const answer = JSON.parse(bytes.subarray(0, length).toString()) as { outputs: Array<{ name: string; datatype: string; shape: number[]; parameters: { binary_data_size: number } }> };
  let at = length;
  const decoded: Record<string, unknown[]> = {};
  for (const output of answer.outputs) {
    decoded[output.name] = valuesOf(output.datatype, bytes.subarray(at, at + output.parameters.binary_data_size));
    at += output.parameters.binary_data_size;
  }
  assert.equal(at, bytes.length);
  const expected = (json as { outputs: Array<{ name: string; data: unknown[] }> }).outputs;
  assert.deepEqual(decoded.OUTPUT_0, expected.find((o) => o.name === 'OUTPUT_0')!.data);
  assert.deepEqual(decoded.sequence_length, expected.find((o) => o.name === 'sequence_length')!.data);
});

test('metadata, readiness, config and the repository API', async () => {
  const get = async (path: string, method = 'GET') => {
    const response = await fetch(`${server.url}${path}`, { method });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  assert.equal((await get('/v2/health/live')).status, 200);
  const meta = await get('/v2/models/gpt');
  assert.equal(meta.body.platform, 'ensemble');
  assert.deepEqual((meta.body.inputs as Array<{ name: string }>).slice(0, 2).map((i) => i.name), ['INPUT_0', 'INPUT_1']);
  assert.equal((await get('/v2/models/gpt/versions/1/ready')).status, 200);
  assert.equal((await get('/v2/models/nope/ready')).status, 404);
  assert.equal((await get('/v2/models/stories/config')).body.platform, 'pipeline');
  assert.equal((await get('/v2/repository/models/gpt2/load', 'POST')).status, 200);
  const index = (await fetch(`${server.url}/v2/repository/index`, { method: 'POST' }).then((r) => r.json())) as Array<{ name: string; state: string }>;
  assert.equal(index.find((m) => m.name === 'gpt2')!.state, 'READY');
  assert.equal((await get('/v2/repository/models/gpt2/unload', 'POST')).status, 200);
  const after = (await fetch(`${server.url}/v2/repository/index`, { method: 'POST' }).then((r) => r.json())) as Array<{ name: string; state: string }>;
  assert.equal(after.find((m) => m.name === 'gpt2')!.state, 'UNAVAILABLE');
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /nv_inference_request_success\{model="gpt"\} [1-9]/);
  assert.match(metrics, /chorus_time_to_first_token_seconds_count\{model="gpt2"\} [1-9]/);
  assert.match(metrics, /chorus_generated_tokens_sum\{model="gpt2"\} [1-9]/);
});
