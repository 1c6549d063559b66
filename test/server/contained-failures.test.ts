/**
 * A broken model fails its own requests, saying what is wrong, while the others keep answering and the
 * server stays up: a built model whose ONNX file is truncated, a checkpoint whose weights are truncated,
 * a sharded checkpoint missing a shard, and a forward model whose run throws on some inputs.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

let server: TestServer;

/** A repository with a healthy model and the broken ones, each behind a pipeline of its name. */
function brokenRepository(): string {
  const root = scratchDir('chorus-broken-');
  buildModel({ source: `${STORIES}/stories260K.bin`, out: join(root, 'healthy') });
  buildModel({ source: `${STORIES}/stories260K.bin`, out: join(root, 'truncated-onnx') });
  const onnx = join(root, 'truncated-onnx/onnx/decoder_model_merged.onnx');
  truncateSync(onnx, Math.floor(statSync(onnx).size / 2));
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: join(root, 'truncated-weights') });
  truncateSync(join(root, 'truncated-weights/model.safetensors'), 5000);
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 3, out: join(root, 'whole') });
  mkdirSync(join(root, 'missing-shard'));
  copyFileSync(join(root, 'whole/config.json'), join(root, 'missing-shard/config.json'));
  renameSync(join(root, 'whole/model.safetensors'), join(root, 'missing-shard/model-00001-of-00002.safetensors'));
  const shards = { 'model.embed_tokens.weight': 'model-00001-of-00002.safetensors', 'lm_head.weight': 'model-00002-of-00002.safetensors' };
  writeFileSync(join(root, 'missing-shard/model.safetensors.index.json'), JSON.stringify({ weight_map: shards }));
  const repository = join(root, 'repository');
  for (const folder of ['models', 'pipelines', 'tokenizers', 'ensembles']) mkdirSync(join(repository, folder), { recursive: true });
  writeFileSync(join(repository, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  for (const name of ['healthy', 'truncated-onnx', 'truncated-weights', 'missing-shard']) {
    writeFileSync(join(repository, `models/${name}.yaml`), `engine: generate\nsource: ${join(root, name)}\ntokenizer: stories\n`);
    writeFileSync(join(repository, `pipelines/${name}.yaml`), `model: ${name}\ndefaults: { max_tokens: 8, temperature: 0 }\n`);
  }
  // pick: y = [1, 2, 3, 4][i]; an index past the end makes the run throw inside ONNX Runtime.
  const g = new GraphBuilder('float32');
  g.output('y', g.op('Gather', [g.floatConstant([1, 2, 3, 4], [4]), g.input('i', 'int64', ['batch', 1])]), 'float32', ['batch', 1]);
  writeFileSync(join(root, 'pick.onnx'), g.serialize().model);
  writeFileSync(join(repository, 'models/pick.yaml'), `engine: forward\nsource: ${join(root, 'pick.onnx')}\nmax_batch_size: 4\n`);
  writeFileSync(join(repository, 'ensembles/pick.yaml'), 'inputs:\n  I: { datatype: INT64, dims: [1] }\noutputs:\n  Y: { datatype: FP32, dims: [1] }\nsteps:\n  - name: pick\n    forward: pick\n    inputs: { i: I }\n    outputs: { y: Y }\n');
  return repository;
}

before(async () => {
  process.env.CHORUS_CACHE = scratchDir('chorus-cache-');
  server = await startServer(brokenRepository());
});
after(() => server?.close());

async function post(path: string, body: unknown): Promise<{ status: number; body: { error?: unknown; text_output?: string; outputs?: Array<{ data: number[] }> } }> {
  const response = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as { error?: unknown } };
}

/** The healthy model still answers, with text. */
async function healthyAnswers(): Promise<void> {
  const answer = await post('/v2/models/healthy/generate', { text_input: 'Once upon a time' });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(answer.body.text_output!.length > 0);
  assert.equal((await fetch(`${server.url}/v2/health/live`)).status, 200);
}

const broken: Array<[string, RegExp]> = [
  ['truncated-onnx', /decoder_model_merged\.onnx.*Protobuf parsing failed/],
  ['truncated-weights', /model\.safetensors is truncated: its header needs \d+ bytes, the file has 5000/],
  ['missing-shard', /shard model-00002-of-00002\.safetensors is missing; model\.safetensors\.index\.json lists \S+ in it/],
];

for (const [name, why] of broken) {
  test(`${name}: its requests fail saying why, twice over; the other models keep answering`, async () => {
    await healthyAnswers();
    for (let attempt = 0; attempt < 2; attempt++) {
      const answer = await post(`/v2/models/${name}/generate`, { text_input: 'Once upon a time' });
      assert.ok(answer.status >= 500 && answer.status < 600, `${answer.status} ${JSON.stringify(answer.body)}`);
      assert.match(JSON.stringify(answer.body.error), why);
      await healthyAnswers();
    }
  });
}

test('a forward model whose run throws fails that request alone and serves the next', async () => {
  const pick = (i: number) => post('/v2/models/pick/infer', { inputs: [{ name: 'I', datatype: 'INT64', shape: [1, 1], data: [i] }] });
  assert.deepEqual((await pick(2)).body.outputs![0]!.data, [3]);
  const failed = await pick(99);
  assert.equal(failed.status, 500);
  assert.match(JSON.stringify(failed.body.error), /step pick: .*indices element out of data bounds, idx=99/);
  assert.deepEqual((await pick(1)).body.outputs![0]!.data, [2]);
  await healthyAnswers();
});
