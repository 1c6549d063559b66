/**
 * How fast ONNX Runtime reads fp32 weights on this CPU, the bound of any batch-1 decode step: one
 * MatMul of a [1, K] row by a [K, N] fp32 weight (MB_WEIGHTS MB, seeded values), run on
 * onnxruntime-node with 1 and with every core's intra-op thread, timed over RUNS runs after a warm-up.
 * GB/s is the weight's bytes over the median run; the last column is what that rate allows GPT-2 124M
 * at batch 1 (its 124M fp32 weights, the tied LM head included, read once a token).
 * Usage: node --import tsx bench/cpu/weight-read-rate.ts   (MB_WEIGHTS=512 RUNS=20)
 * Prints a table; writes bench/results/weight-read-rate-cpu-<date>.json.
 */
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';

const ROOT = join(import.meta.dirname, '../..');
const MB = Number(process.env.MB_WEIGHTS ?? 512);
const RUNS = Number(process.env.RUNS ?? 20);
const GPT2_BYTES = 124_439_808 * 4;
const K = 4096;
const N = Math.round((MB * 2 ** 20) / (K * 4));

// The weight's values: a seeded sequence, small and varied (not all zeros, which a reader could skip).
const data = new Float32Array(K * N);
let state = 12345;
for (let i = 0; i < data.length; i++) {
  state = (state * 1103515245 + 12345) >>> 0;
  data[i] = (state / 2 ** 32 - 0.5) * 0.02;
}
const graph = new GraphBuilder('float32');
const x = graph.input('x', 'float32', [1, K]);
const y = graph.op('MatMul', [x, graph.weight('w', { dims: [K, N], data })]);
graph.output('y', y, 'float32', [1, N]);
const model = graph.serialize().model;

const rows: Array<{ threads: number; msPerRun: number; gbPerS: number; gpt2TokensPerS: number }> = [];
const input = new ort.Tensor('float32', Float32Array.from({ length: K }, (_, i) => Math.sin(i)), [1, K]);
for (const threads of [...new Set([1, cpus().length])]) {
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all' });
  await session.run({ x: input });
  const times: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const started = performance.now();
    await session.run({ x: input });
    times.push(performance.now() - started);
  }
  await session.release();
  const ms = times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
  const gbPerS = (K * N * 4) / (ms / 1000) / 1e9;
  rows.push({ threads, msPerRun: ms, gbPerS, gpt2TokensPerS: (gbPerS * 1e9) / GPT2_BYTES });
}

const cpu = `${cpus()[0]?.model.trim() ?? 'cpu'} (${cpus().length} cores)`;
console.log(`fp32 weight read rate: MatMul [1, ${K}] x [${K}, ${N}] (${((K * N * 4) / 2 ** 20).toFixed(0)} MiB), onnxruntime-node, median of ${RUNS}; ${cpu}`);
console.log('| intra-op threads | ms a run | GB/s | GPT-2 124M fp32 batch-1 bound, tokens/s |');
console.log('| ---: | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.threads} | ${r.msPerRun.toFixed(2)} | ${r.gbPerS.toFixed(1)} | ${r.gpt2TokensPerS.toFixed(0)} |`);
const date = new Date().toISOString().slice(0, 10);
const out = join(ROOT, `bench/results/weight-read-rate-cpu-${date}.json`);
writeFileSync(out, `${JSON.stringify({ createdAt: new Date().toISOString(), cpu, k: K, n: N, runs: RUNS, command: 'node --import tsx bench/cpu/weight-read-rate.ts', rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
