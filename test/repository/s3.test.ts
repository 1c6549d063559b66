import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, test } from 'node:test';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { lastValueFrom, toArray } from 'rxjs';
import S3rver from 's3rver';
import { makeCheckpoint } from '../../src/modelbuild/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
const saved = { ...process.env };
let server: S3rver;
let endpoint: string;

function repository(model: string, tokenizer: string): string {
  const dir = scratchDir('chorus-s3-repo-');
  for (const folder of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, folder));
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\n${tokenizer}\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\n${model}\ntokenizer: stories\n`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\ndefaults: { max_tokens: 60, temperature: 0 }\n');
  return dir;
}

async function answer(service: Service): Promise<string> {
  return (await lastValueFrom(service.pipeline('stories').run({ text_input: '' }).pipe(toArray()))).at(-1)!.choices[0]!.text;
}

before(async () => {
  server = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: scratchDir('chorus-s3rver-') });
  const { port } = await server.run();
  endpoint = `http://127.0.0.1:${port}`;
  const s3 = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  await s3.send(new CreateBucketCommand({ Bucket: 'models' }));
  for (const file of ['stories260K.bin', 'tok512.bin']) await s3.send(new PutObjectCommand({ Bucket: 'models', Key: `stories/${file}`, Body: readFileSync(`${STORIES}/${file}`) }));
  // A whole checkpoint directory under one prefix.
  const checkpoint = scratchDir('chorus-s3-ckpt-');
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 4, out: checkpoint });
  for (const file of readdirSync(checkpoint)) await s3.send(new PutObjectCommand({ Bucket: 'models', Key: `tiny-llama/${file}`, Body: readFileSync(join(checkpoint, file)) }));
  s3.destroy();
});
after(async () => {
  process.env = saved;
  await server.close();
});
beforeEach(() => {
  process.env = { ...saved, CHORUS_CACHE: scratchDir('chorus-s3-cache-'), AWS_ENDPOINT_URL_S3: endpoint, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };
});

test('s3:// sources: a file under a prefix, and a whole checkpoint prefix, are fetched, built and served', async () => {
  const service = Service.open(repository('source: s3://models/stories\nfile: stories260K.bin', 'source: s3://models/stories\nfile: tok512.bin'), { log: () => {} });
  assert.ok((await answer(service)).startsWith(STORY));
  await service.close();
  assert.deepEqual(readFileSync(join(process.env.CHORUS_CACHE!, 's3', 'models', 'stories', 'stories260K.bin')), readFileSync(`${STORIES}/stories260K.bin`));
  const checkpoint = Service.open(repository('source: s3://models/tiny-llama', 'source: s3://models/stories\nfile: tok512.bin'), { log: () => {} });
  assert.equal(typeof (await answer(checkpoint)), 'string');
  await checkpoint.close();
  assert.deepEqual(readdirSync(join(process.env.CHORUS_CACHE!, 's3', 'models', 'tiny-llama')).sort(), ['config.json', 'model.safetensors']);
});

test('a missing object, a missing bucket and an unreachable server each give an error naming the URL', async () => {
  const tokenizer = 'source: s3://models/stories\nfile: tok512.bin';
  const missing = Service.open(repository('source: s3://models/stories\nfile: nope.bin', tokenizer), { log: () => {} });
  await assert.rejects(answer(missing), { code: 'CHORUS_FILE_MISSING', message: 'model stories: s3://models/stories/nope.bin does not exist' });
  await missing.close();
  const bucket = Service.open(repository('source: s3://no-such-bucket/stories\nfile: stories260K.bin', tokenizer), { log: () => {} });
  await assert.rejects(answer(bucket), { code: 'CHORUS_NOT_FOUND', message: 'model stories: s3://no-such-bucket/stories: bucket no-such-bucket does not exist' });
  await bucket.close();
  process.env.AWS_ENDPOINT_URL_S3 = 'http://127.0.0.1:1';
  const unreachable = Service.open(repository('source: s3://models/stories\nfile: stories260K.bin', tokenizer), { log: () => {} });
  // (The tokenizer was fetched above; the model is not in the cache.)
  await assert.rejects(answer(unreachable), { code: 'CHORUS_SOURCE_UNAVAILABLE', message: 'model stories: cannot fetch s3://models/stories from http://127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1' });
  await unreachable.close();
});
