/**
 * instance_group across GPUs: a GPT-2 124M-shaped model (seeded weights) with one instance on each of
 * GPUs 0 and 1 answers 32 concurrent greedy requests; both GPUs hold its weights (nvidia-smi) and the
 * answers equal those of a single-GPU model. Usage (two-GPU host): node --import tsx bench/gpu/multi-gpu.ts <out-dir>
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { EnginePool } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { Service } from '../../src/pipeline/index.ts';

const out = process.argv[2] ?? '/tmp/multi-gpu';
const work = '/tmp/multi-gpu-work';
mkdirSync(join(work, 'repo', 'models'), { recursive: true });
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'ckpt') });
buildModel({ source: join(work, 'ckpt'), out: join(work, 'built') });
writeFileSync(join(work, 'repo/models/both.yaml'), `engine: generate\nsource: ${join(work, 'built')}\ndevice: cuda\ninstance_group: [{ count: 1, kind: gpu, gpus: [0, 1] }]\n`);
writeFileSync(join(work, 'repo/models/one.yaml'), `engine: generate\nsource: ${join(work, 'built')}\ndevice: cuda:0\n`);
const memory = (): number[] => execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' }).trim().split('\n').map(Number);
const service = Service.open(join(work, 'repo'), { log: () => {} });
const before = memory();
const prompts = Array.from({ length: 32 }, (_, p) => Array.from({ length: 8 + p }, (_, i) => (p * 997 + i * 31) % 50000));
const run = async (name: string) => {
  const model = await service.store.model(name);
  if (model.engine !== 'generate') throw new Error('not a generate model');
  const outputs = await Promise.all(prompts.map(async (prompt) => (await lastValueFrom(model.generator.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 24, end_id: 50256 } }).pipe(toArray()))).map((e) => e.token)));
  return { outputs, generator: model.generator };
};
const both = await run('both');
const loaded = memory();
const perInstance = both.generator instanceof EnginePool ? both.generator.instances.map((e) => e.stats().requestsFinished) : [];
await service.store.unload('both');
const one = await run('one');
const same = both.outputs.flat().filter((id, i) => id === one.outputs.flat()[i]).length;
const result = {
  gpu_memory_mib_before: before,
  gpu_memory_mib_with_both_instances: loaded,
  requests_per_instance: perInstance,
  greedy_ids_identical_to_one_gpu: `${same}/${both.outputs.flat().length}`,
};
console.log(JSON.stringify(result, null, 2));
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'multi-gpu.json'), JSON.stringify(result, null, 2));
await service.close();
