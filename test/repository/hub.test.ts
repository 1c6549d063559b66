import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { Service } from '../../src/pipeline/index.ts';
import { fetchFromHub } from '../../src/repository/index.ts';
import { startHubServer, type HubServer } from '../helpers/hub-server.ts';
import { STORIES } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
let hub: HubServer;
let secret: HubServer;
const saved = { ...process.env };

/** A repository whose stories model and tokenizer come from hub id `id` (file names inside it given). */
function repository(id: string, modelFile = 'stories260K.bin', extra = ''): string {
  const dir = scratchDir('chorus-hub-repo-');
  for (const folder of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(dir, folder));
  writeFileSync(join(dir, 'tokenizers/stories.yaml'), `type: llama2c\nsource: hf:${id}\nfile: tok512.bin\n`);
  writeFileSync(join(dir, 'models/stories.yaml'), `engine: generate\nsource: hf:${id}\nfile: ${modelFile}\ntokenizer: stories\n${extra}`);
  writeFileSync(join(dir, 'pipelines/stories.yaml'), 'model: stories\ndefaults: { max_tokens: 60, temperature: 0 }\n');
  return dir;
}

async function story(service: Service): Promise<string> {
  return (await lastValueFrom(service.pipeline('stories').run({ text_input: '' }).pipe(toArray()))).at(-1)!.choices[0]!.text;
}

const files = { 'stories260K.bin': readFileSync(`${STORIES}/stories260K.bin`), 'tok512.bin': readFileSync(`${STORIES}/tok512.bin`), 'README.md': Buffer.from('# stories\n') };

before(async () => {
  hub = await startHubServer({ 'karpathy/tinyllamas': files });
  secret = await startHubServer({ 'acme/private': files }, { token: 'hf_s3cret' });
});
after(async () => {
  process.env = saved;
  await hub.close();
  await secret.close();
});
beforeEach(() => {
  process.env = { ...saved, CHORUS_CACHE: scratchDir('chorus-hub-cache-') };
  delete process.env.HF_HUB_OFFLINE;
  delete process.env.HF_TOKEN;
});

test('a hub id is downloaded into the cache on first load, then served from it', async () => {
  process.env.HF_ENDPOINT = hub.url;
  const service = Service.open(repository('karpathy/tinyllamas'), { log: () => {} });
  assert.ok((await story(service)).startsWith(STORY));
  await service.close();
  const cached = join(process.env.CHORUS_CACHE!, 'hf', 'karpathy--tinyllamas', 'main');
  assert.deepEqual(readFileSync(join(cached, 'stories260K.bin')), files['stories260K.bin']);
  assert.ok(!existsSync(join(cached, 'README.md')), 'only the files the definition needs');
  // The second load needs no network.
  const downloads = hub.requests.length;
  process.env.HF_HUB_OFFLINE = '1';
  const again = Service.open(repository('karpathy/tinyllamas'), { log: () => {} });
  assert.ok((await story(again)).startsWith(STORY));
  await again.close();
  assert.equal(hub.requests.length, downloads);
});

test('HF_TOKEN is sent; without it a private id is refused, saying so', async () => {
  process.env.HF_ENDPOINT = secret.url;
  const refused = Service.open(repository('acme/private'), { log: () => {} });
  await assert.rejects(story(refused), { code: 'CHORUS_SOURCE_UNAVAILABLE', message: /access denied \(HTTP 401\); set HF_TOKEN/ });
  await refused.close();
  process.env.HF_TOKEN = 'hf_s3cret';
  const allowed = Service.open(repository('acme/private'), { log: () => {} });
  assert.ok((await story(allowed)).startsWith(STORY));
  await allowed.close();
});

test('a missing file and an unreachable hub each give an error naming the file or the URL', async () => {
  process.env.HF_ENDPOINT = hub.url;
  const missing = Service.open(repository('karpathy/tinyllamas', 'nope.bin'), { log: () => {} });
  await assert.rejects(story(missing), { code: 'CHORUS_FILE_MISSING', message: `model stories: nope.bin is not in ${hub.url}/karpathy/tinyllamas (revision main): ${hub.url}/karpathy/tinyllamas/resolve/main/nope.bin does not exist` });
  await missing.close();
  const closed = await startHubServer({});
  await closed.close();
  process.env.HF_ENDPOINT = closed.url;
  const unreachable = Service.open(repository('karpathy/tinyllamas'), { log: () => {} });
  await assert.rejects(story(unreachable), { code: 'CHORUS_SOURCE_UNAVAILABLE', message: `model stories: cannot fetch ${closed.url}/karpathy/tinyllamas (revision main): fetch failed (connect ECONNREFUSED ${closed.url.slice(7)})` });
  await unreachable.close();
  // With a fallback, the model is served on random weights instead, and the reason is logged.
  const logged: string[] = [];
  const fallback = Service.open(repository('karpathy/tinyllamas', 'stories260K.bin', 'fallback: { arch: llama, size: tiny, seed: 1 }\n'), { log: (line) => logged.push(line) });
  assert.equal(typeof (await story(fallback)), 'string');
  await fallback.close();
  assert.ok(logged.some((line) => line.startsWith(`WARNING: model stories: cannot fetch ${closed.url}/`) && line.includes('serving RANDOM weights (llama, tiny, seed 1)')), logged.join('\n'));
});

test('pytorch_model.bin is fetched from a repository that has no safetensors, and left out of one that has them', async () => {
  const bin = { 'config.json': Buffer.from('{}'), 'pytorch_model-00001-of-00002.bin': Buffer.from('a'), 'pytorch_model-00002-of-00002.bin': Buffer.from('b'), 'pytorch_model.bin.index.json': Buffer.from('{}'), 'training_args.bin': Buffer.from('c') };
  const server = await startHubServer({ 'old/model': bin, 'new/model': { ...bin, 'model.safetensors': Buffer.from('d') } });
  try {
    process.env.HF_ENDPOINT = server.url;
    const [old, current] = [scratchDir('chorus-hub-old-'), scratchDir('chorus-hub-new-')];
    await fetchFromHub({ id: 'old/model', revision: 'main', path: old });
    await fetchFromHub({ id: 'new/model', revision: 'main', path: current });
    assert.deepEqual(readdirSync(old).sort(), ['config.json', 'pytorch_model-00001-of-00002.bin', 'pytorch_model-00002-of-00002.bin', 'pytorch_model.bin.index.json']);
    assert.deepEqual(readdirSync(current).sort(), ['config.json', 'model.safetensors']);
  } finally {
    await server.close();
  }
});
