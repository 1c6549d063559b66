/**
 * The native engine on the CPU against transformers.js, in-process, on the same ONNX weights and the same
 * onnxruntime-node: Chorus's native engine (the slot decoder, `chorus build --flavor cuda
 * --slot-decoder`) and its TypeScript engine (the portable build), against transformers.js 4.3's
 * `generate` on the portable build, one call at a time, 16 concurrent calls, and one padded batch of 16.
 * Greedy, 16-token prompts, NEW_TOKENS new tokens each with no early stop; every figure the median of
 * three runs after a warm-up. The native rows also give the share of their time inside ONNX Runtime's
 * runs (the addon's counters): the rest is the addon's own work and JavaScript.
 * Usage: node --import tsx bench/cpu/native-vs-transformersjs.ts
 *   BENCH_MODELS=stories,gpt2,qwen2 (default), BENCH_NEW_TOKENS=64, BENCH_QWEN2_NEW_TOKENS=16,
 *   BENCH_INT8=0 (leave out the native engine on int8 weights; transformers.js stays on fp32),
 *   BENCH_OUT=<json> (default bench/results/cpu-native-vs-transformersjs-<date>.json)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { randomPrompts, timeIt } from './common.ts';

env.allowRemoteModels = false;
const PROMPT = 16;
const CONCURRENT = 16;
const ROOT = join(import.meta.dirname, '../..');
const SHARED = join(ROOT, '../shared');
const work = join(tmpdir(), 'chorus-bench-cpu-native');

interface Row {
  model: string;
  setting: string;
  system: string;
  newTokens: number;
  tokensPerS: number;
  /** Over transformers.js generate's per-call figure in the same setting. */
  overCalls?: number;
  /** 16 concurrent: over transformers.js's padded batch of 16. */
  overPadded?: number;
  /** Native rows: the share of the run inside ONNX Runtime's session runs. */
  ortShare?: number;
}

interface ModelCase {
  name: string;
  /** The checkpoint (a llama2.c .bin or a Hugging Face folder) both builds come from. */
  source: string;
  vocab: number;
  newTokens: number;
}

async function benchModel(c: ModelCase): Promise<Row[]> {
  const rows: Row[] = [];
  const slug = c.name.replace(/\W+/g, '-');
  const portable = join(work, `${slug}-portable`);
  const slots = join(work, `${slug}-slots`);
  buildModel({ source: c.source, out: portable });
  buildModel({ source: c.source, out: slots, flavor: 'cuda', slotDecoder: true });
  const one = randomPrompts(1, c.vocab, PROMPT);
  const many = randomPrompts(CONCURRENT, c.vocab, PROMPT);
  const params = { temperature: 0, request_output_len: c.newTokens, min_length: c.newTokens };
  const add = (setting: string, system: string, requests: number, seconds: number, ortShare?: number): void => {
    rows.push({ model: c.name, setting, system, newTokens: c.newTokens, tokensPerS: (requests * c.newTokens) / seconds, ...(ortShare === undefined ? {} : { ortShare }) });
  };
  const chorus = (engine: Engine, batch: number[][]) => Promise.all(batch.map((p) => lastValueFrom(engine.submit({ inputIds: p, params }).pipe(toArray()))));

  // The engine's default (intra-op threads: one a core, one in all under 16 MiB of weights; no spinning),
  // with ONNX Runtime's spinning, and (BENCH_INT8, default on) the default on an int8 build of the same checkpoint.
  const variants: Array<{ dir: string; spinning: boolean; label: string }> = [
    { dir: slots, spinning: false, label: '' },
    { dir: slots, spinning: true, label: ', threads spinning' },
  ];
  if (process.env.BENCH_INT8 !== '0') {
    const int8 = join(work, `${slug}-slots-int8`);
    buildModel({ source: c.source, out: int8, flavor: 'cuda', slotDecoder: true, weights: 'int8' });
    variants.push({ dir: int8, spinning: false, label: ', int8 weights' });
  }
  for (const { dir, spinning, label } of variants) {
    const native = await NativeEngine.open(dir, { maxBatchSize: CONCURRENT, slotLength: PROMPT + c.newTokens + 8, intraOpSpinning: spinning });
    for (const [setting, batch] of [['batch 1', one], [`${CONCURRENT} concurrent`, many]] as const) {
      const before = native.profile();
      const started = performance.now();
      const seconds = await timeIt(() => chorus(native, batch));
      const after = native.profile();
      add(setting, `Chorus native engine${label}`, batch.length, seconds, (after.sessionMs - before.sessionMs) / (performance.now() - started));
    }
    await native.close();
  }
  const ts = await OrtEngine.open(portable, { maxBatchSize: CONCURRENT });
  add('batch 1', 'Chorus TypeScript engine', 1, await timeIt(() => chorus(ts, one)));
  add(`${CONCURRENT} concurrent`, 'Chorus TypeScript engine', CONCURRENT, await timeIt(() => chorus(ts, many)));
  await ts.close();

  const model = await AutoModelForCausalLM.from_pretrained(portable, { local_files_only: true, dtype: 'fp32', device: 'cpu', model_file_name: 'decoder_model_merged' });
  const ids = (batch: number[][]) => new Tensor('int64', BigInt64Array.from(batch.flat(), BigInt), [batch.length, PROMPT]);
  const generate = (batch: number[][]) =>
    model.generate({
      input_ids: ids(batch),
      attention_mask: new Tensor('int64', new BigInt64Array(batch.length * PROMPT).fill(1n), [batch.length, PROMPT]),
      max_new_tokens: c.newTokens,
      min_new_tokens: c.newTokens,
      do_sample: false,
    });
  add('batch 1', 'transformers.js generate', 1, await timeIt(() => generate(one)));
  add(`${CONCURRENT} concurrent`, 'transformers.js generate', CONCURRENT, await timeIt(() => Promise.all(many.map((p) => generate([p])))));
  add(`${CONCURRENT} concurrent`, 'transformers.js generate, padded batch', CONCURRENT, await timeIt(() => generate(many)));
  await model.dispose();

  for (const row of rows) {
    const calls = rows.find((r) => r.setting === row.setting && r.system === 'transformers.js generate')!;
    row.overCalls = row.tokensPerS / calls.tokensPerS;
    const padded = rows.find((r) => r.setting === row.setting && r.system === 'transformers.js generate, padded batch');
    if (padded !== undefined) row.overPadded = row.tokensPerS / padded.tokensPerS;
  }
  return rows;
}

const envInt = (name: string, fallback: number): number => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${process.env[name]}"`);
  return value;
};
const newTokens = envInt('BENCH_NEW_TOKENS', 64);
const wanted = (process.env.BENCH_MODELS ?? 'stories,gpt2,qwen2').split(',');
const unknown = wanted.filter((m) => !['stories', 'gpt2', 'qwen2'].includes(m));
if (unknown.length > 0) throw new Error(`BENCH_MODELS takes stories, gpt2 and qwen2, got ${unknown.join(', ')}`);
mkdirSync(work, { recursive: true });
const cases: ModelCase[] = [];
if (wanted.includes('stories')) cases.push({ name: 'stories260K', source: join(SHARED, 'models/stories260K/stories260K.bin'), vocab: 512, newTokens });
if (wanted.includes('gpt2')) {
  makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'gpt2-124m-ckpt') });
  cases.push({ name: 'GPT-2 124M (random weights)', source: join(work, 'gpt2-124m-ckpt'), vocab: 50257, newTokens });
}
if (wanted.includes('qwen2')) {
  makeCheckpoint({ arch: 'qwen2', size: 'real', seed: 1, out: join(work, 'qwen2-0.5b-ckpt') });
  cases.push({ name: 'Qwen2-0.5B shape (random weights)', source: join(work, 'qwen2-0.5b-ckpt'), vocab: 151936, newTokens: envInt('BENCH_QWEN2_NEW_TOKENS', 16) });
}
const rows: Row[] = [];
for (const c of cases) rows.push(...(await benchModel(c)));

const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'setting', 'system', 'tok/s', 'over tjs calls', 'over tjs padded batch', 'in ORT runs']));
console.log(line(['---', '---', '---', '---:', '---:', '---:', '---:']));
for (const r of rows) {
  console.log(line([r.model, r.setting, r.system, r.tokensPerS.toFixed(1), `${r.overCalls!.toFixed(2)}x`, r.overPadded === undefined ? '' : `${r.overPadded.toFixed(2)}x`, r.ortShare === undefined ? '' : `${(100 * r.ortShare).toFixed(0)}%`]));
}
const date = new Date().toISOString().slice(0, 10);
const out = process.env.BENCH_OUT ?? join(ROOT, 'bench/results', `cpu-native-vs-transformersjs-${date}.json`);
writeFileSync(out, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, promptTokens: PROMPT, concurrent: CONCURRENT, rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
