/**
 * A whole repository on S3 (s3rver): mirrored and served, and in poll mode a changed model file is
 * picked up while a request in flight on the old model runs to its end. Model control modes none and
 * poll refuse load and unload requests; `chorus serve --repository s3://...` follows its bucket.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, test } from 'node:test';
import { CreateBucketCommand, DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { lastValueFrom, toArray } from 'rxjs';
import S3rver from 's3rver';
import type { Engine } from '../../src/generation/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { syncS3Repository } from '../../src/repository/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
const saved = { ...process.env };
let server: S3rver;
let endpoint: string;
let s3: S3Client;

const put = (key: string, body: string | Buffer): Promise<unknown> => s3.send(new PutObjectCommand({ Bucket: 'repo', Key: key, Body: body }));

/** stories260K with its token embeddings negated: a valid model that tells another story. */
function changedStories(): Buffer {
  const bytes = Buffer.from(readFileSync(`${STORIES}/stories260K.bin`));
  for (let at = 28; at < 28 + 512 * 64 * 4; at += 4) bytes.writeFloatLE(-bytes.readFloatLE(at), at);
  return bytes;
}

/** A repository under `prefix`: the stories tokenizer, model and pipeline, their files beside them. */
async function upload(prefix: string): Promise<void> {
  await put(`${prefix}/tokenizers/stories.yaml`, 'type: llama2c\nsource: files/tok512.bin\n');
  await put(`${prefix}/models/stories.yaml`, 'engine: generate\nsource: files/stories260K.bin\ntokenizer: stories\n');
  await put(`${prefix}/pipelines/stories.yaml`, 'model: stories\ndefaults: { max_tokens: 60, temperature: 0 }\n');
  await put(`${prefix}/files/tok512.bin`, readFileSync(`${STORIES}/tok512.bin`));
  await put(`${prefix}/files/stories260K.bin`, readFileSync(`${STORIES}/stories260K.bin`));
}

const answer = async (service: Service, maxTokens = 60): Promise<string> => (await lastValueFrom(service.pipeline('stories').run({ text_input: '', max_tokens: maxTokens }).pipe(toArray()))).at(-1)!.choices[0]!.text;

before(async () => {
  server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: scratchDir('chorus-s3rver-') });
  const { port } = await server.run();
  endpoint = `http://127.0.0.1:${port}`;
  s3 = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  await s3.send(new CreateBucketCommand({ Bucket: 'repo' }));
});
after(async () => {
  process.env = saved;
  s3.destroy();
  await server.close();
});
beforeEach(() => {
  process.env = { ...saved, CHORUS_CACHE: scratchDir('chorus-s3-cache-'), AWS_ENDPOINT_URL_S3: endpoint, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };
});

test('a repository in S3 is mirrored and served; a sync fetches only what changed, and deletes what went', async () => {
  await upload('prod');
  const first = await syncS3Repository('s3://repo/prod');
  assert.deepEqual(first.changed, ['files/stories260K.bin', 'files/tok512.bin', 'models/stories.yaml', 'pipelines/stories.yaml', 'tokenizers/stories.yaml']);
  const service = Service.open(first.dir, { log: () => {} });
  assert.ok((await answer(service)).startsWith(STORY));
  await service.close();
  assert.deepEqual((await syncS3Repository('s3://repo/prod')).changed, []);
  await put('prod/pipelines/extra.yaml', 'model: stories\n');
  await s3.send(new DeleteObjectCommand({ Bucket: 'repo', Key: 'prod/pipelines/extra.yaml' }));
  await put('prod/pipelines/other.yaml', 'model: stories\n');
  assert.deepEqual((await syncS3Repository('s3://repo/prod')).changed, ['pipelines/other.yaml']);
  await s3.send(new DeleteObjectCommand({ Bucket: 'repo', Key: 'prod/pipelines/other.yaml' }));
  assert.deepEqual((await syncS3Repository('s3://repo/prod')).changed, ['pipelines/other.yaml']);
  assert.equal(existsSync(join(first.dir, 'pipelines/other.yaml')), false);
  await assert.rejects(syncS3Repository('s3://repo/nothing-here'), { code: 'CHORUS_FILE_MISSING', message: /s3:\/\/repo\/nothing-here holds no objects/ });
  await assert.rejects(syncS3Repository('s3://no-such-bucket/x'), { code: 'CHORUS_NOT_FOUND', message: 's3://no-such-bucket/x: bucket no-such-bucket does not exist' });
});

test('poll: a changed model file is picked up while the request in flight finishes on the old model', async () => {
  await upload('poll');
  const { dir } = await syncS3Repository('s3://repo/poll');
  const service = Service.open(dir, { log: () => {}, control: 'poll' });
  await service.loadAll();
  const old = (await service.store.model('stories')) as { generator: Engine };
  const runningAtClose: number[] = [];
  const close = old.generator.close.bind(old.generator);
  old.generator.close = async () => {
    runningAtClose.push(old.generator.stats().running);
    await close();
  };
  const inFlight = lastValueFrom(service.pipeline('stories').run({ text_input: '', max_tokens: 400 }).pipe(toArray()));
  while (old.generator.stats().running === 0) await new Promise((resolve) => setTimeout(resolve, 1));
  await put('poll/files/stories260K.bin', changedStories());
  assert.deepEqual((await syncS3Repository('s3://repo/poll')).changed, ['files/stories260K.bin']);
  const changes = await service.refresh();
  assert.deepEqual(changes, { added: [], changed: ['stories'], removed: [] });
  const story = (await inFlight).at(-1)!.choices[0]!;
  assert.ok(story.text.startsWith(STORY), 'the request in flight ran to its end on the old model');
  assert.equal(story.finishReason, 'length');
  assert.deepEqual(runningAtClose, [0], 'the old model closed once idle');
  assert.ok(!(await answer(service)).startsWith(STORY), 'new requests run the new model');
  await assert.rejects(service.store.load('stories'), { code: 'CHORUS_UNSUPPORTED', message: /cannot load stories: the model control mode is poll/ });
  await assert.rejects(service.store.unload('stories'), { code: 'CHORUS_UNSUPPORTED' });
  // The model and its pipeline removed: unloaded, and gone.
  await s3.send(new DeleteObjectCommand({ Bucket: 'repo', Key: 'poll/models/stories.yaml' }));
  await s3.send(new DeleteObjectCommand({ Bucket: 'repo', Key: 'poll/pipelines/stories.yaml' }));
  await syncS3Repository('s3://repo/poll');
  assert.deepEqual(await service.refresh(), { added: [], changed: [], removed: ['stories'] });
  assert.deepEqual(service.store.index(), []);
  assert.throws(() => service.pipeline('stories'), { code: 'CHORUS_NOT_FOUND' });
  await service.close();
});

test('none: every model loads at start, and load or unload requests are refused', async () => {
  await upload('none');
  const service = Service.open((await syncS3Repository('s3://repo/none')).dir, { log: () => {}, control: 'none' });
  await service.loadAll();
  assert.deepEqual(service.store.index(), [{ name: 'stories', state: 'READY' }]);
  await assert.rejects(service.store.unload('stories'), { message: /cannot unload stories: the model control mode is none/ });
  await service.close();
});

test('chorus serve --repository s3://... --model-control-mode poll follows the bucket', async () => {
  await upload('served');
  const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', '--repository', 's3://repo/served', '--port', '0', '--grpc-port', '0', '--quiet', '--model-control-mode', 'poll', '--repository-poll-secs', '0.2'], { cwd: ROOT, env: process.env });
  let stderr = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /serving s3:\/\/repo\/served on (http:\/\/[\d.:]+)/.exec(stderr);
      if (match) resolve(match[1]!);
    });
    child.on('exit', () => reject(new Error(`the server exited early: ${stderr}`)));
  });
  const generate = async (): Promise<string> => ((await (await fetch(`${url}/v2/models/stories/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"text_input": ""}' })).json()) as { text_output: string }).text_output;
  assert.ok((await generate()).startsWith(STORY));
  const index = (await (await fetch(`${url}/v2/repository/index`, { method: 'POST' })).json()) as Array<{ name: string; state: string }>;
  assert.deepEqual(index.map((m) => `${m.name}:${m.state}`), ['stories:READY'], 'loaded at start');
  const refused = await fetch(`${url}/v2/repository/models/stories/unload`, { method: 'POST' });
  assert.equal(refused.status, 501);
  await put('served/pipelines/stories.yaml', 'model: stories\ndefaults: { max_tokens: 3, temperature: 0 }\n');
  let text = await generate();
  for (let i = 0; i < 100 && text.startsWith(STORY); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    text = await generate();
  }
  assert.ok(STORY.startsWith(text) && text.length < 20, `the changed pipeline answers 3 tokens: ${text}`);
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
});
