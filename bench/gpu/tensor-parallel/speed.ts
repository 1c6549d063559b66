/**
 * Tensor parallelism on a two-GPU host: one checkpoint (make.py's, the files transformers loads too)
 * built unsplit and split in two, each run on the native engine with CUDA graphs (TP=1 on GPU 0, TP=2
 * on GPUs 0 and 1), one engine at a time:
 * - speed: greedy, prompts of 128 tokens, 128 new tokens, batch 1 and 64 (that many requests at once):
 *   tokens/s, ms per step, TTFT, and TP=2 over TP=1;
 * - parity: 4 prompts x 128 greedy tokens (512 ids), TP=2's ids against TP=1's, position by position;
 * - memory: gpu_memory_utilization lowered until the weights no longer fit one GPU (with the
 *   activations' reserve) but half of them do: TP=1 must be refused, TP=2 must load, and its load
 *   log says each GPU's share.
 * Usage: node --import tsx bench/gpu/tensor-parallel/speed.ts <checkpoint-dir> <work-dir> <name> [fp16|bf16|fp32]
 *   -> <work-dir>/<name>-<dtype>-tp.json (hf.py adds transformers' device_map="auto" beside it)
 * Knobs: TP_PARTS=speed,parity,memory  TP_BATCHES=1,64  TP_PROMPT=128  TP_NEW=128  TP_PAGED=0|1
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type NativeEngineOptions, type RequestMetrics } from '../../../src/generation/index.ts';
import { activationReserve, PAGED_PREFILL_TOKENS } from '../../../src/generation/engines/native-memory.ts';
import { rankWeightBytes } from '../../../src/generation/engines/native-ranks.ts';
import { loadNative } from '../../../src/native/index.ts';
import { buildModel, type BuildOptions } from '../../../src/modelbuild/index.ts';
import { envCounts, seededRows } from '../speed/common.ts';

const [checkpoint, work, name, dtypeArg] = process.argv.slice(2);
if (checkpoint === undefined || work === undefined || name === undefined) throw new Error('usage: speed.ts <checkpoint-dir> <work-dir> <name> [fp16|bf16|fp32]');
const dtype = (dtypeArg ?? 'fp16') as NonNullable<BuildOptions['dtype']>;
const PROMPT = Number(process.env.TP_PROMPT ?? 128);
const NEW = Number(process.env.TP_NEW ?? 128);
const batches = envCounts('TP_BATCHES', '1,64');
const parts = (process.env.TP_PARTS ?? 'speed,parity,memory').split(',');
const paged = process.env.TP_PAGED === '1';
const addon = loadNative().addon;
if (addon === undefined || addon.cudaDevices() < 2) throw new Error('this bench needs the CUDA addon and two GPUs');

const gpuMemoryMiB = (): number[] => execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' }).trim().split('\n').map(Number);

const dirs = { 1: join(work, `${name}-${dtype}-tp1`), 2: join(work, `${name}-${dtype}-tp2`) } as const;
const build: Record<string, number> = {};
for (const n of [1, 2] as const) {
  if (existsSync(join(dirs[n], 'chorus_build.json'))) continue;
  const started = performance.now();
  buildModel({ source: checkpoint, out: dirs[n], dtype, flavor: 'cuda', slotDecoder: true, ...(n === 1 ? {} : { tensorParallel: n }) });
  build[`tp${n}_seconds`] = (performance.now() - started) / 1000;
  console.log(`${name} ${dtype} TP=${n}: built in ${build[`tp${n}_seconds`]!.toFixed(0)} s`);
}

const metrics: RequestMetrics[] = [];
const result: Record<string, unknown> = { name, dtype, checkpoint, prompt: PROMPT, new_tokens: NEW, build, speed: [], load: {} };
const save = (): void => writeFileSync(join(work, `${name}-${dtype}-tp.json`), JSON.stringify(result, null, 2));

async function open(n: 1 | 2, options: NativeEngineOptions, log: string[]): Promise<NativeEngine> {
  return NativeEngine.open(dirs[n], {
    provider: 'cuda',
    deviceId: 0,
    ...(n === 1 ? {} : { tensorParallel: n, rankDevices: [1] }),
    cudaGraph: true,
    pagedCache: paged,
    log: (line) => void log.push(line),
    onRequestDone: (m) => void metrics.push(m),
    ...options,
  });
}

const generate = (engine: NativeEngine, prompts: number[][], tokens: number) =>
  Promise.all(prompts.map(async (p) => (await lastValueFrom(engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: tokens }, stream: true }).pipe(toArray()))).map((e) => e.token)));

const ids: Record<number, number[][]> = {};
for (const n of [1, 2] as const) {
  if (!parts.includes('speed') && !parts.includes('parity')) break;
  const log: string[] = [];
  const engine = await open(n, { maxBatchSize: Math.max(...batches, 4), slotLength: PROMPT + NEW }, log);
  (result.load as Record<string, string[]>)[`tp${n}`] = log;
  for (const line of log) console.log(`TP=${n}: ${line}`);
  try {
    if (parts.includes('parity')) ids[n] = await generate(engine, seededRows(4, PROMPT, 32000), NEW);
    for (const batch of parts.includes('speed') ? batches : []) {
      const prompts = seededRows(batch, PROMPT, 32000);
      await generate(engine, prompts, NEW);
      metrics.length = 0;
      const before = engine.stats().decodeSteps;
      const started = performance.now();
      const out = await generate(engine, prompts, NEW);
      const seconds = (performance.now() - started) / 1000;
      const tokens = out.reduce((sum, row) => sum + row.length, 0);
      const ttft = metrics.map((m) => m.timeToFirstTokenMs).sort((a, b) => a - b);
      const row = { tp: n, batch, tokens, tokens_per_s: tokens / seconds, ms_per_step: (seconds * 1000) / Math.max(1, engine.stats().decodeSteps - before), ttft_ms_median: ttft[Math.floor(ttft.length / 2)], gpu_memory_mib: gpuMemoryMiB() };
      (result.speed as unknown[]).push(row);
      console.log(JSON.stringify(row));
      save();
    }
  } finally {
    await engine.close();
  }
}

if (ids[1] !== undefined && ids[2] !== undefined) {
  const a = ids[1].flat();
  const b = ids[2].flat();
  const same = a.filter((id, i) => id === b[i]).length;
  // Where the ids first part, per row: a tie broken the other way sends greedy decoding elsewhere.
  const firstDiff = ids[1].map((row, r) => row.findIndex((id, i) => id !== ids[2]![r]![i]));
  result.parity = { tokens: a.length, same, share: same / a.length, first_difference_per_row: firstDiff };
  console.log(`parity: TP=2 gives TP=1's greedy id at ${same} of ${a.length} positions (${((100 * same) / a.length).toFixed(1)}%); first difference per row ${JSON.stringify(firstDiff)}`);
}

if (parts.includes('memory')) {
  // A utilization that leaves rank 0's GPU room for half the weights and the reserve, not for all of them.
  const file = paged ? 'decoder_model_paged.onnx' : 'decoder_model_slots.onnx';
  const whole = rankWeightBytes(dirs[1], 1, 0, file);
  const half = Math.max(rankWeightBytes(dirs[2], 2, 0, file), rankWeightBytes(dirs[2], 2, 1, file));
  const { total } = addon.gpuMemory(0);
  // The activations' reserve as the engine plans it (native-memory.ts), for 4 slots.
  const spec = (JSON.parse(readFileSync(join(dirs[1], 'chorus_build.json'), 'utf8')) as { spec: { numLayers: number; numKvHeads: number; numHeads: number; headDim: number; vocabSize: number } }).spec;
  const shape = { layers: spec.numLayers, kvHeads: spec.numKvHeads, heads: spec.numHeads, headDim: spec.headDim, vocab: spec.vocabSize, element: dtype === 'fp32' ? 4 : 2 };
  const reserve = activationReserve(shape, 4, Math.max(PAGED_PREFILL_TOKENS, PROMPT + NEW));
  // Half the weights' difference is left for TP=2's cache; TP=1 lacks it.
  const utilization = Math.min(1, (half + reserve + (whole - half) / 2) / total);
  const memory: Record<string, unknown> = { utilization, weights_tp1_bytes: whole, weights_tp2_rank_bytes: half, reserve_bytes: reserve, gpu_total_bytes: total };
  for (const n of [1, 2] as const) {
    const log: string[] = [];
    try {
      const engine = await open(n, { maxBatchSize: 4, slotLength: PROMPT + NEW, gpuMemoryUtilization: utilization, pagedCache: 'auto' }, log);
      const out = await generate(engine, seededRows(1, PROMPT, 32000), 16);
      memory[`tp${n}`] = { loaded: true, log, first_ids: out[0] };
      await engine.close();
    } catch (error) {
      memory[`tp${n}`] = { loaded: false, error: String(error), log };
    }
    console.log(`memory TP=${n} at gpu_memory_utilization ${utilization.toFixed(3)}: ${JSON.stringify(memory[`tp${n}`])}`);
  }
  result.memory = memory;
}
save();

const speed = result.speed as Array<{ tp: number; batch: number; tokens_per_s: number; ms_per_step: number }>;
if (speed.length > 0) {
  console.log(`${'batch'.padEnd(6)} ${'TP=1 tok/s'.padStart(11)} ${'TP=2 tok/s'.padStart(11)} ${'TP=2/TP=1'.padStart(10)} ${'TP=1 ms/step'.padStart(13)} ${'TP=2 ms/step'.padStart(13)}`);
  for (const batch of batches) {
    const one = speed.find((r) => r.tp === 1 && r.batch === batch);
    const two = speed.find((r) => r.tp === 2 && r.batch === batch);
    if (one === undefined || two === undefined) continue;
    console.log(`${String(batch).padEnd(6)} ${one.tokens_per_s.toFixed(0).padStart(11)} ${two.tokens_per_s.toFixed(0).padStart(11)} ${(two.tokens_per_s / one.tokens_per_s).toFixed(2).padStart(10)} ${one.ms_per_step.toFixed(2).padStart(13)} ${two.ms_per_step.toFixed(2).padStart(13)}`);
  }
}
