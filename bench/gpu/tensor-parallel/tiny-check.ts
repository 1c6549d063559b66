/**
 * Tensor parallelism's runtime on two GPUs, quickly (a minute or two): tiny Llama and GPT-2 (seeded
 * weights) built unsplit and split in two, in fp32 and fp16, run on the native engine at TP=1 (GPU 0)
 * and TP=2 (GPUs 0 and 1) through the same mix of requests (greedy, min_length, a repetition penalty,
 * seeded sampling, two beam searches) in each setting: the step loop with and without CUDA graphs, the
 * continuous core, the paged cache, and an instance's cancellation mid-run. Each TP=2 row's tokens are
 * compared with TP=1's in the same setting (fp32: all equal expected; fp16: the share is reported).
 * Prints a table and writes <out>/tp-tiny-check.json.
 * Usage: node --import tsx bench/gpu/tensor-parallel/tiny-check.ts [out-dir]
 * Knobs: TP_PROVIDER=cpu (CPU ranks, fp32 only: the script's own check)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type NativeEngineOptions, type SamplingParams } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';

const out = process.argv[2] ?? join(tmpdir(), 'tp-tiny-check');
const work = join(tmpdir(), 'tp-tiny-check-work');
mkdirSync(out, { recursive: true });

const mix: Array<{ prompt: number[]; params: SamplingParams }> = [
  { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 40 } },
  { prompt: [30, 31, 32, 33, 34], params: { beam_width: 3, request_output_len: 12 } },
  { prompt: [12, 13], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 24 } },
  { prompt: [40, 41, 42, 43], params: { temperature: 0, repetition_penalty: 1.4, request_output_len: 24 } },
  { prompt: [7, 8, 9], params: { beam_width: 2, request_output_len: 10 } },
  { prompt: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, min_length: 5, request_output_len: 16 } },
  { prompt: [21, 22, 23], params: { temperature: 0.7, runtime_top_p: 0.9, random_seed: 9, request_output_len: 24 } },
];
const settings: Record<string, NativeEngineOptions> = {
  'step loop, graphs': { cudaGraph: true },
  'step loop, no graphs': { cudaGraph: false },
  'continuous core': { cudaGraph: true, continuous: true },
  'paged cache': { cudaGraph: true, pagedCache: true },
};

async function tokens(engine: NativeEngine): Promise<number[][]> {
  const events = await Promise.all(mix.map((r) => lastValueFrom(engine.submit({ inputIds: r.prompt, params: r.params, stream: true }).pipe(toArray()))));
  return events.map((list) => list.map((e) => e.token));
}

const provider = process.env.TP_PROVIDER === 'cpu' ? 'cpu' : 'cuda';
const dtypes = provider === 'cpu' ? (['fp32'] as const) : (['fp32', 'fp16'] as const);
const rows: Array<Record<string, unknown>> = [];
for (const arch of ['llama', 'gpt2'] as const) {
  const ckpt = join(work, `${arch}-ckpt`);
  makeCheckpoint({ arch, size: 'tiny', seed: 5, out: ckpt });
  for (const dtype of dtypes) {
    const dirs = { 1: join(work, `${arch}-${dtype}-tp1`), 2: join(work, `${arch}-${dtype}-tp2`) };
    buildModel({ source: ckpt, out: dirs[1], dtype, flavor: 'cuda', slotDecoder: true });
    buildModel({ source: ckpt, out: dirs[2], dtype, flavor: 'cuda', slotDecoder: true, tensorParallel: 2 });
    for (const [setting, options] of Object.entries(settings)) {
      const row: Record<string, unknown> = { arch, dtype, setting };
      try {
        const got: Record<number, number[][]> = {};
        const log: string[] = [];
        for (const n of [1, 2] as const) {
          const engine = await NativeEngine.open(dirs[n], { provider, deviceId: 0, maxBatchSize: 8, slotLength: 96, ...(n === 2 ? { tensorParallel: 2, ...(provider === 'cuda' ? { rankDevices: [1] } : {}) } : {}), ...options, log: (line) => void log.push(line) });
          try {
            got[n] = await tokens(engine);
            // A cancelled stream mid-run, then the mix again: the ranks must still agree.
            const subscription = engine.submit({ inputIds: [3, 4, 5], params: { temperature: 0, request_output_len: 60 } }).subscribe();
            await new Promise((resolve) => setTimeout(resolve, 20));
            subscription.unsubscribe();
            const again = await tokens(engine);
            row[`tp${n}_same_after_cancel`] = JSON.stringify(again) === JSON.stringify(got[n]);
          } finally {
            await engine.close();
          }
        }
        const a = got[1]!.flat();
        const b = got[2]!.flat();
        row.tokens = a.length;
        row.equal = a.filter((id, i) => id === b[i]).length;
        row.all_equal = a.length === b.length && row.equal === a.length;
        row.shares = log.find((line) => line.startsWith('tensor_parallel'));
      } catch (error) {
        row.error = String(error);
      }
      rows.push(row);
      console.log(JSON.stringify(row));
    }
  }
}
console.table(rows.map((r) => ({ arch: r.arch, dtype: r.dtype, setting: r.setting, equal: `${r.equal}/${r.tokens}`, all_equal: r.all_equal, after_cancel: `${r.tp1_same_after_cancel}/${r.tp2_same_after_cancel}`, error: r.error })));
writeFileSync(join(out, 'tp-tiny-check.json'), JSON.stringify(rows, null, 2));
