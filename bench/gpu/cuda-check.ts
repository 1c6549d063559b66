/**
 * CPU and CUDA give the same greedy ids (fp32) through the engine: the tiny golden checkpoints and
 * GPT-2 124M / Qwen2-0.5B / t5-small shapes (seeded random weights). Prints a table, writes JSON.
 * Usage (GPU host): node --import tsx bench/gpu/cuda-check.ts <out-dir> [name-regexp]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { OrtEngine, Seq2SeqEngine, type Engine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type CheckpointArch, type CheckpointSize } from '../../src/modelbuild/index.ts';

const out = process.argv[2] ?? '/tmp/cuda-check';
const work = '/tmp/cuda-check-work';
mkdirSync(out, { recursive: true });
const models: Array<{ name: string; arch: CheckpointArch; size: CheckpointSize; seed: number; seq2seq?: boolean }> = [
  { name: 'gpt2-tiny', arch: 'gpt2', size: 'tiny', seed: 11 },
  { name: 'llama-tiny', arch: 'llama', size: 'tiny', seed: 12 },
  { name: 'qwen2-tiny', arch: 'qwen2', size: 'tiny', seed: 13 },
  { name: 't5-tiny', arch: 't5', size: 'tiny', seed: 14, seq2seq: true },
  { name: 'bart-tiny', arch: 'bart', size: 'tiny', seed: 16, seq2seq: true },
  { name: 'gpt2-124m', arch: 'gpt2', size: 'real', seed: 1 },
  { name: 'qwen2-0.5b', arch: 'qwen2', size: 'real', seed: 2 },
  { name: 't5-small', arch: 't5', size: 'real', seed: 3, seq2seq: true },
];
const prompts = Array.from({ length: 8 }, (_, p) => Array.from({ length: 4 + p * 5 }, (_, i) => (p * 131 + i * 17 + 3) % 500));
const rows: Array<Record<string, unknown>> = [];
for (const m of models.filter((model) => new RegExp(process.argv[3] ?? '').test(model.name))) {
  const checkpoint = join(work, m.name);
  makeCheckpoint({ arch: m.arch, size: m.size, seed: m.seed, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
  const ids: Record<string, number[][]> = {};
  for (const device of ['cpu', 'cuda']) {
    const options = { executionProviders: [device] };
    const engine: Engine = m.seq2seq ? await Seq2SeqEngine.open(`${checkpoint}-onnx`, options) : await OrtEngine.open(`${checkpoint}-onnx`, options);
    // An end id no greedy run reaches, so every sequence runs its full length.
    ids[device] = await Promise.all(prompts.map(async (prompt) => (await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 32, end_id: 499 } }).pipe(toArray()))).map((e) => e.token)));
    await engine.close();
  }
  const total = ids.cpu!.flat().length;
  const same = ids.cpu!.flat().filter((id, i) => id === ids.cuda!.flat()[i]).length;
  rows.push({ model: m.name, sequences: prompts.length, tokens: total, identical: same });
  console.log(`${m.name.padEnd(12)} cpu vs cuda greedy ids identical: ${same}/${total}`);
}
writeFileSync(join(out, 'cuda-check.json'), JSON.stringify({ rows }, null, 2));
