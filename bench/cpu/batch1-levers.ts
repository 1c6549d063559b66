/**
 * What moves the native engine's batch-1 step on the CPU, side by side in one run: each model built as
 * a slot decoder in fp32 and with int8 weights (LM head int8 and, apart, left in fp32), run with
 * ONNX Runtime's intra-op threads spinning or not, beside transformers.js 4.3's `generate` on the
 * portable fp32 build, and on one intra-op thread. A 16-token prompt then NEW_TOKENS greedy tokens.
 * Every system runs once per round, in turn (each round starting one system later, 100 ms apart),
 * ROUNDS rounds after a warm-up: on shared cores a round's systems see about the same load,
 * so each figure is the median over rounds of tokens/s and of the ratio to the round's fp32 native run
 * and to its transformers.js run.
 * Usage: node --import tsx bench/cpu/batch1-levers.ts
 *   BENCH_MODELS=gpt2,stories,qwen2 (default gpt2,stories), BENCH_NEW_TOKENS=64 (qwen2: 16),
 *   BENCH_SYSTEMS=fp32,fp32-spin,fp32-1t,int8-head-fp32,int8,int8-spin,int8-1t (default all),
 *   BENCH_ROUNDS=5, BENCH_OUT=<json> (default bench/results/cpu-batch1-levers-<date>.json)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type BuildOptions } from '../../src/modelbuild/index.ts';
import { randomPrompts } from './common.ts';

env.allowRemoteModels = false;
const PROMPT = 16;
const ROOT = join(import.meta.dirname, '../..');
const work = join(tmpdir(), 'chorus-bench-cpu-levers');

const envInt = (name: string, fallback: number): number => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${process.env[name]}"`);
  return value;
};
const rounds = envInt('BENCH_ROUNDS', 5);

interface ModelCase {
  key: string;
  name: string;
  source: () => string;
  vocab: number;
  newTokens: number;
}
const MODELS: ModelCase[] = [
  { key: 'stories', name: 'stories260K', source: () => join(ROOT, '../shared/models/stories260K/hf'), vocab: 512, newTokens: envInt('BENCH_NEW_TOKENS', 64) },
  {
    key: 'gpt2',
    name: 'GPT-2 124M (random weights)',
    source: () => {
      makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'gpt2-ckpt') });
      return join(work, 'gpt2-ckpt');
    },
    vocab: 50257,
    newTokens: envInt('BENCH_NEW_TOKENS', 64),
  },
  {
    key: 'qwen2',
    name: 'Qwen2-0.5B shape (random weights)',
    source: () => {
      makeCheckpoint({ arch: 'qwen2', size: 'real', seed: 1, out: join(work, 'qwen2-ckpt') });
      return join(work, 'qwen2-ckpt');
    },
    vocab: 151936,
    newTokens: envInt('BENCH_NEW_TOKENS', 16),
  },
];

/** One system under test: how its build differs and how its engine is opened. */
interface NativeSystem {
  key: string;
  name: string;
  build: Pick<BuildOptions, 'weights' | 'quantizeHead'>;
  spinning?: boolean;
  threads?: number;
}
const NATIVE: NativeSystem[] = [
  { key: 'fp32', name: 'native fp32', build: {} },
  { key: 'fp32-spin', name: 'native fp32, threads spinning', build: {}, spinning: true },
  { key: 'fp32-1t', name: 'native fp32, 1 thread', build: {}, threads: 1 },
  { key: 'int8-head-fp32', name: 'native int8, LM head fp32', build: { weights: 'int8', quantizeHead: false } },
  { key: 'int8', name: 'native int8', build: { weights: 'int8' } },
  { key: 'int8-spin', name: 'native int8, threads spinning', build: { weights: 'int8' }, spinning: true },
  { key: 'int8-1t', name: 'native int8, 1 thread', build: { weights: 'int8' }, threads: 1 },
];
// The native fp32 run and transformers.js's are always measured: the ratios are to them.
const systems = (process.env.BENCH_SYSTEMS ?? NATIVE.map((s) => s.key).join(',')).split(',');
const unknownSystems = systems.filter((k) => !NATIVE.some((s) => s.key === k));
if (unknownSystems.length > 0) throw new Error(`BENCH_SYSTEMS takes ${NATIVE.map((s) => s.key).join(', ')}, got ${unknownSystems.join(', ')}`);
const TJS = 'transformers.js generate, fp32';

interface Row {
  model: string;
  system: string;
  newTokens: number;
  tokensPerS: number;
  overNativeFp32: number;
  overTransformersJs: number;
  weightBytes?: number;
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function benchModel(c: ModelCase): Promise<Row[]> {
  const source = c.source();
  const prompt = randomPrompts(1, c.vocab, PROMPT)[0]!;
  const params = { temperature: 0, request_output_len: c.newTokens, min_length: c.newTokens };
  const runs = new Map<string, () => Promise<unknown>>();
  const weightBytes = new Map<string, number>();
  const engines: NativeEngine[] = [];
  for (const s of NATIVE.filter((n) => n.key === 'fp32' || systems.includes(n.key))) {
    const dir = join(work, `${c.key}-slots-${s.build.weights ?? 'fp32'}${s.build.quantizeHead === false ? '-head-fp32' : ''}`);
    const built = buildModel({ source, out: dir, flavor: 'cuda', slotDecoder: true, ...s.build });
    weightBytes.set(s.name, built.stats.weightBytes);
    const engine = await NativeEngine.open(dir, { maxBatchSize: 1, slotLength: PROMPT + c.newTokens + 8, intraOpSpinning: s.spinning ?? false, ...(s.threads === undefined ? {} : { intraOpThreads: s.threads }) });
    engines.push(engine);
    runs.set(s.name, () => lastValueFrom(engine.submit({ inputIds: prompt, params }).pipe(toArray())));
  }
  const portable = join(work, `${c.key}-portable`);
  buildModel({ source, out: portable });
  const model = await AutoModelForCausalLM.from_pretrained(portable, { local_files_only: true, dtype: 'fp32', device: 'cpu', model_file_name: 'decoder_model_merged' });
  const ids = new Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, PROMPT]);
  const mask = new Tensor('int64', new BigInt64Array(PROMPT).fill(1n), [1, PROMPT]);
  runs.set(TJS, () => model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: c.newTokens, min_new_tokens: c.newTokens, do_sample: false }));

  const rates = new Map<string, number[]>([...runs.keys()].map((k) => [k, []]));
  const order = [...runs];
  for (let round = 0; round <= rounds; round++) {
    // Each round starts one system later, and each run waits for the threads of the one before to stop spinning.
    for (let i = 0; i < order.length; i++) {
      const [name, run] = order[(i + round) % order.length]!;
      await new Promise((resolve) => setTimeout(resolve, 100));
      const started = performance.now();
      await run();
      if (round > 0) rates.get(name)!.push((c.newTokens * 1000) / (performance.now() - started));
    }
  }
  for (const engine of engines) await engine.close();
  await model.dispose();
  const fp32 = rates.get('native fp32')!;
  const tjs = rates.get(TJS)!;
  return [...rates].map(([system, r]) => ({
    model: c.name,
    system,
    newTokens: c.newTokens,
    tokensPerS: median(r),
    overNativeFp32: median(r.map((v, i) => v / fp32[i]!)),
    overTransformersJs: median(r.map((v, i) => v / tjs[i]!)),
    ...(weightBytes.has(system) ? { weightBytes: weightBytes.get(system)! } : {}),
  }));
}

const wanted = (process.env.BENCH_MODELS ?? 'gpt2,stories').split(',');
const unknown = wanted.filter((m) => !MODELS.some((c) => c.key === m));
if (unknown.length > 0) throw new Error(`BENCH_MODELS takes ${MODELS.map((c) => c.key).join(', ')}, got ${unknown.join(', ')}`);
mkdirSync(work, { recursive: true });
const loadBefore = loadavg();
const rows: Row[] = [];
for (const c of MODELS.filter((m) => wanted.includes(m.key))) rows.push(...(await benchModel(c)));
const loadAfter = loadavg();

const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'system', 'weights MB', 'tok/s', 'over native fp32', 'over transformers.js']));
console.log(line(['---', '---', '---:', '---:', '---:', '---:']));
for (const r of rows) {
  const mb = r.weightBytes === undefined ? '' : (r.weightBytes / 1e6).toFixed(1);
  console.log(line([r.model, r.system, mb, r.tokensPerS.toFixed(1), `${r.overNativeFp32.toFixed(2)}x`, `${r.overTransformersJs.toFixed(2)}x`]));
}
console.log(`load average before ${loadBefore.map((x) => x.toFixed(1)).join(' / ')}, after ${loadAfter.map((x) => x.toFixed(1)).join(' / ')}`);
const out = process.env.BENCH_OUT ?? join(ROOT, 'bench/results', `cpu-batch1-levers-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(out, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, promptTokens: PROMPT, rounds, loadAverage: { before: loadBefore, after: loadAfter }, rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
