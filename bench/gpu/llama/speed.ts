/**
 * Chorus's side of the real-size comparison: one Llama-shaped checkpoint (made by make.py, the files
 * transformers loads too) built with `chorus build`'s API for the native engine (cuda flavor, slot
 * decoder), then greedy decoding on the GPU with CUDA graphs: prompts of 128 tokens, 128 new tokens,
 * batch 1 and batch 64 (that many requests submitted together). Reports the build's time and peak RSS,
 * tokens/s, ms per decode step, TTFT, the GPU memory in use and its clocks and power over the measured
 * runs (bench/gpu/gpu-clocks.ts); and the decode steps alone (the prompt's
 * prefill left out): each request's time from its first token to its last over the steps between them
 * (the median request's), as ms a step and tokens/s, to set against the weights' floor, which is a
 * decode step's.
 * Each cache runs in turn (one engine at a time, so each plans its memory alone): `slots` (the
 * contiguous slots, prompt + new tokens each) and `paged` (the paged cache, whatever memory is left
 * up to gpu_memory_utilization, rows of up to LLAMA_MAX_SEQUENCE tokens).
 * Usage: node --import tsx bench/gpu/llama/speed.ts <checkpoint-dir> <work-dir> <name> [fp16|bf16]
 *   -> <work-dir>/<name>-<dtype>.json
 * Knobs: LLAMA_BATCHES=1,64  LLAMA_PROMPT=128  LLAMA_NEW=128  LLAMA_CACHES=slots,paged
 *   LLAMA_MAX_SEQUENCE=4096 (the paged rows' limit)  LLAMA_FALLBACK=paged (measured when a cache fails)
 *   LLAMA_WEIGHTS=int8|int4 (quantized projections; the results file is then <name>-<dtype>-<weights>.json)
 *   LLAMA_GROUP_SIZE=128 (int4)  LLAMA_CUDA_GRAPH=0 (plain runs)
 *   LLAMA_SLOT_ATTENTION=GroupQueryAttention (the slot decoder's attention, to compare with the addon's)
 *   LLAMA_CONTINUOUS=1 (on the continuous core, as `chorus serve` runs GPU models; default: the step loop)
 *   LLAMA_BUILT=<dir> (the build there is run as it is where it exists, else built there and kept: for
 *   variants that differ only in engine knobs)
 *   LLAMA_REPEAT=1 (measured runs of each batch: the median run's figures, TTFT's median and p10/p90
 *   over every request of every run)
 */
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, tap, toArray } from 'rxjs';
import { NativeEngine, type RequestMetrics } from '../../../src/generation/index.ts';
import { buildModel, type BuildOptions, type WeightsMode } from '../../../src/modelbuild/index.ts';
import { withGpuClocks } from '../gpu-clocks.ts';
import { envCounts, seededRows } from '../speed/common.ts';

const [checkpoint, work, name, dtypeArg] = process.argv.slice(2);
if (checkpoint === undefined || work === undefined || name === undefined) {
  throw new Error('usage: speed.ts <checkpoint-dir> <work-dir> <name> [fp16|bf16]');
}
const dtype = (dtypeArg ?? 'fp16') as NonNullable<BuildOptions['dtype']>;
const PROMPT = Number(process.env.LLAMA_PROMPT ?? 128);
const NEW = Number(process.env.LLAMA_NEW ?? 128);
const batches = envCounts('LLAMA_BATCHES', '1,64');
const REPEAT = Number(process.env.LLAMA_REPEAT ?? 1);
if (!Number.isInteger(REPEAT) || REPEAT < 1) throw new Error(`LLAMA_REPEAT must be a whole number of runs, 1 or more, not '${process.env.LLAMA_REPEAT}'`);
const weights = (process.env.LLAMA_WEIGHTS ?? 'checkpoint') as WeightsMode;
const variant = `${dtype}${weights === 'checkpoint' ? '' : `-${weights}`}`;
const groupSize = process.env.LLAMA_GROUP_SIZE === undefined ? {} : { groupSize: Number(process.env.LLAMA_GROUP_SIZE) };

/** GPU memory in use on device 0, in MiB, as nvidia-smi reports it. */
function gpuMemoryMiB(): number {
  const out = execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  return Number(out.trim().split('\n')[0]);
}

const dir = process.env.LLAMA_BUILT ?? join(work, `${name}-${variant}-built`);
const buildStarted = performance.now();
const slotAttention = process.env.LLAMA_SLOT_ATTENTION === undefined ? {} : { slotAttention: process.env.LLAMA_SLOT_ATTENTION as NonNullable<BuildOptions['slotAttention']> };
let build: Record<string, unknown> = { reused: dir };
if (process.env.LLAMA_BUILT !== undefined && existsSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))) {
  console.log(`${name} ${variant}: the build in ${dir}`);
} else {
  const built = buildModel({ source: checkpoint, out: dir, dtype, flavor: 'cuda', slotDecoder: true, weights, ...groupSize, ...slotAttention });
  const seconds = (performance.now() - buildStarted) / 1000;
  const peak = process.resourceUsage().maxRSS / 1024;
  build = { seconds, peak_rss_mib: peak, weight_bytes: built.stats.weightBytes, quantization: built.quantization };
  console.log(`${name} ${variant}: built in ${seconds.toFixed(1)} s, peak RSS ${peak.toFixed(0)} MiB`);
}

const metrics: RequestMetrics[] = [];
const rows: Array<Record<string, unknown>> = [];
const loadLines: string[] = [];
const save = (): void => writeFileSync(join(work, `${name}-${variant}.json`), JSON.stringify({ name, dtype, weights, checkpoint, built: dir, build, prompt: PROMPT, new_tokens: NEW, load: loadLines, rows }, null, 2));
const caches = (process.env.LLAMA_CACHES ?? 'slots,paged').split(',');
const fallback = process.env.LLAMA_FALLBACK;
for (const cache of [...caches, fallback ?? 'slots']) {
  if (cache !== 'slots' && cache !== 'paged') throw new Error(`LLAMA_CACHES and LLAMA_FALLBACK take slots and paged, got '${cache}'`);
}
for (let i = 0; i < caches.length; i++) {
  const cache = caches[i]!;
  const paged = cache === 'paged';
  try {
    const engine = await NativeEngine.open(dir, {
      provider: 'cuda',
      maxBatchSize: Math.max(...batches),
      slotLength: paged ? Number(process.env.LLAMA_MAX_SEQUENCE ?? 4096) : PROMPT + NEW,
      pagedCache: paged,
      cudaGraph: process.env.LLAMA_CUDA_GRAPH !== '0',
      continuous: process.env.LLAMA_CONTINUOUS === '1',
      log: (line) => void loadLines.push(`${cache}: ${line}`),
      onRequestDone: (m) => void metrics.push(m),
    });
    for (const line of loadLines) console.log(line);
    try {
      await measure(engine, cache);
    } finally {
      await engine.close();
    }
  } catch (error) {
    rows.push({ cache, error: String(error) });
    console.log(`${name} ${variant} ${cache}: ${String(error)}`);
    save();
    // LLAMA_FALLBACK: the cache measured in place of one that fails.
    if (fallback !== undefined && !caches.includes(fallback)) caches.push(fallback);
  }
}
save();

async function measure(engine: NativeEngine, cache: string): Promise<void> {
  for (const batch of batches) {
    const prompts = seededRows(batch, PROMPT, 32000);
    // Each request's tokens' arrival times (ms).
    let arrivals: number[][] = [];
    const run = () => {
      arrivals = prompts.map(() => []);
      return Promise.all(
        prompts.map((p, i) =>
          lastValueFrom(
            engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW }, stream: true }).pipe(
              tap(() => void arrivals[i]!.push(performance.now())),
              toArray(),
            ),
          ),
        ),
      );
    };
    await run();
    await run();
    metrics.length = 0;
    // LLAMA_REPEAT measured runs: the median run's figures, TTFT over every request of every run.
    const measured: Array<{ seconds: number; steps: number; tokens: number; decodeMsPerStep: number | undefined; results: Awaited<ReturnType<typeof run>> }> = [];
    // The GPU's clocks and power sampled over the measured runs (a host's limits change instruction-bound figures).
    const { clocks } = await withGpuClocks(async () => {
      for (let i = 0; i < REPEAT; i++) {
        const before = engine.stats();
        const started = performance.now();
        const results = await run();
        const seconds = (performance.now() - started) / 1000;
        const decodeMs = arrivals.filter((t) => t.length > 1).map((t) => (t[t.length - 1]! - t[0]!) / (t.length - 1)).sort((a, b) => a - b);
        measured.push({
          seconds,
          steps: engine.stats().decodeSteps - before.decodeSteps,
          tokens: results.reduce((sum, events) => sum + events.length, 0),
          decodeMsPerStep: decodeMs[Math.floor(decodeMs.length / 2)],
          results,
        });
      }
    });
    const { seconds, steps, tokens, decodeMsPerStep, results } = [...measured].sort((a, b) => a.tokens / a.seconds - b.tokens / b.seconds)[Math.floor(REPEAT / 2)]!;
    const ttft = metrics.map((m) => m.timeToFirstTokenMs).sort((a, b) => a - b);
    const row = {
      setting: `${cache} batch ${batch}`,
      cache,
      batch,
      tokens,
      tokens_per_s: tokens / seconds,
      ms_per_step: (seconds * 1000) / Math.max(1, steps),
      ttft_ms_median: ttft[Math.floor(ttft.length / 2)],
      decode_ms_per_step: decodeMsPerStep,
      decode_tokens_per_s: decodeMsPerStep === undefined ? undefined : (batch * 1000) / decodeMsPerStep,
      gpu_memory_mib: gpuMemoryMiB(),
      ids_first_row: results[0]!.slice(0, 16).map((e) => e.token),
      gpu_clocks: clocks,
      ...(REPEAT > 1
        ? {
            repeats: REPEAT,
            tokens_per_s_each: measured.map((m) => m.tokens / m.seconds),
            ttft_ms_p10: ttft[Math.floor(ttft.length / 10)],
            ttft_ms_p90: ttft[Math.floor((ttft.length * 9) / 10)],
          }
        : {}),
    };
    rows.push(row);
    console.log(JSON.stringify(row));
    save();
  }
}
