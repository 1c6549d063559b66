/**
 * int8 weights against fp32 on the CPU, batch 1, through the native engine: stories260K and a
 * Qwen2-0.5B-shaped model (seeded random weights), each built fp32 and int8 (slot decoder), a
 * 16-token prompt then BENCH_STEPS (default 64) greedy tokens; the median of three runs after a
 * warm-up. The machine's load average is recorded beside the figures (other work on the cores slows
 * both builds alike, but not always evenly).
 *
 *   npx tsx bench/quant/cpu-speed.ts        BENCH_MODELS=stories,qwen2 (default both)
 * Each build runs twice: with the engine's default intra-op threads (one per core) and with one thread.
 *
 * Prints a table and writes bench/results/quant-cpu-speed-<date>.json.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type WeightsMode } from '../../src/modelbuild/index.ts';
import { timeIt } from '../cpu/common.ts';

const ROOT = join(import.meta.dirname, '../..');
const work = join(tmpdir(), 'chorus-bench-quant-cpu');
const PROMPT = 16;
const steps = Number(process.env.BENCH_STEPS ?? 64);
const sources: Record<string, () => { name: string; source: string }> = {
  stories: () => ({ name: 'stories260K', source: join(ROOT, '../shared/models/stories260K/hf') }),
  qwen2: () => {
    makeCheckpoint({ arch: 'qwen2', size: 'real', seed: 1, out: join(work, 'qwen2-ckpt') });
    return { name: 'Qwen2-0.5B shape (random weights)', source: join(work, 'qwen2-ckpt') };
  },
};
const wanted = (process.env.BENCH_MODELS ?? 'stories,qwen2').split(',');
for (const m of wanted) if (sources[m] === undefined) throw new Error(`BENCH_MODELS takes ${Object.keys(sources).join(', ')}, got ${m}`);
mkdirSync(work, { recursive: true });

type Threads = 'default' | 1;
const rows: Array<{ model: string; weights: WeightsMode | 'fp32'; threads: Threads; weightBytes: number; tokensPerS: number; vsFp32: number; loadAverage: number[] }> = [];
for (const key of wanted) {
  const { name, source } = sources[key]!();
  const fp32Rate = new Map<Threads, number>();
  for (const weights of ['checkpoint', 'int8'] as const) {
    const dir = join(work, `${key}-${weights}`);
    const built = buildModel({ source, out: dir, flavor: 'cuda', slotDecoder: true, weights });
    for (const threads of ['default', 1] as const) {
      const engine = await NativeEngine.open(dir, { maxBatchSize: 1, slotLength: PROMPT + steps + 8, ...(threads === 1 ? { intraOpThreads: 1 } : {}) });
      const prompt = Array.from({ length: PROMPT }, (_, i) => 3 + ((i * 7) % 400));
      const params = { temperature: 0, request_output_len: steps, min_length: steps };
      const load = loadavg();
      const seconds = await timeIt(() => lastValueFrom(engine.submit({ inputIds: prompt, params }).pipe(toArray())));
      await engine.close();
      const rate = steps / seconds;
      if (weights === 'checkpoint') fp32Rate.set(threads, rate);
      rows.push({ model: name, weights: weights === 'checkpoint' ? 'fp32' : weights, threads, weightBytes: built.stats.weightBytes, tokensPerS: rate, vsFp32: rate / fp32Rate.get(threads)!, loadAverage: load.map((x) => Math.round(x * 100) / 100) });
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
process.stdout.write(`CPU: ${cpus().length} x ${cpus()[0]?.model ?? 'unknown'}, batch 1, ${PROMPT}-token prompt + ${steps} greedy tokens, native engine\n`);
process.stdout.write('model                               weights  threads  weights MB  tokens/s  vs fp32  load avg (1/5/15 min)\n');
for (const r of rows) {
  process.stdout.write(`${r.model.padEnd(35)} ${r.weights.padEnd(7)}  ${String(r.threads).padEnd(7)}  ${(r.weightBytes / 1e6).toFixed(1).padStart(10)}  ${r.tokensPerS.toFixed(1).padStart(8)}  ${r.vsFp32.toFixed(2).padStart(6)}x  ${r.loadAverage.join(' / ')}\n`);
}
const results = join(ROOT, 'bench/results');
mkdirSync(results, { recursive: true });
const file = join(results, `quant-cpu-speed-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(file, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, promptTokens: PROMPT, steps, rows }, null, 2)}\n`);
process.stdout.write(`wrote ${file}\n`);
