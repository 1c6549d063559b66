/**
 * Chorus's side of the GPU speed comparison: GPT-2 124M (seeded weights, the checkpoint hf.py loads
 * too), fp16 on CUDA, greedy, prompt 128, 128 new tokens, at batch 1, 8, 32, 64 (that many requests
 * submitted together) and under 64 concurrent streaming requests; both builder flavors; two paths:
 *   loop   - the TypeScript step loop (streamed requests; min_length = new tokens, so no early stop),
 *   greedy - the GreedySearch fast path (requests not streamed; the whole decode in one session run;
 *            tokens/s counts the tokens actually generated, in case the random model ends a row early),
 *   native - the native engine (cuda flavor only; streamed requests; its cache stays on the device and
 *            greedy rows take the argmax there; no min_length, which would bring logits to the host, so
 *            tokens/s counts the tokens actually generated, as for greedy),
 *   native-graph - the same with each batch size's decode step captured as a CUDA graph.
 *   native-graph-invariant - the same, batch-invariant: every step runs all 64 slots (one graph).
 *   native-graph-one-step - native-graph with one decode step per call into the addon (greedySteps 1;
 *            native-graph runs greedy steps back to back inside the addon, each step's tokens sent on
 *            as it ends, until a row stops or a request arrives).
 *   native-graph-runs16 - native-graph with at most 16 greedy steps per call (greedySteps 16).
 *   native-graph-gqa, native-graph-matmul - native-graph on a slot decoder built with GroupQueryAttention
 *            instead of the addon's attention, or with MatMul projections instead of the addon's Linear.
 * Reports ms per decode step, tokens/s and time to first token; profile: the share of the time inside
 * session.run (the rest is host copies of the cache and JavaScript).
 * Usage: node --import tsx bench/gpu/speed/chorus.ts <work-dir>  -> <work-dir>/chorus.json
 * Knobs: SPEED_FLAVORS=portable,cuda  SPEED_PATHS=loop,greedy,native  SPEED_MAX_BATCH=64 (loop rows only,
 * concurrent streams included: batches over 8 take minutes there)  SPEED_PROVIDER=cuda|cpu  SPEED_DTYPE=fp16|fp32
 * SPEED_PROMPT=128  SPEED_NEW=128  SPEED_SETTINGS='batch 1,64 concurrent streams' (default: all).
 * SPEED_DECODE=sample: sampled instead of greedy (temperature 0.8, top-k 50, top-p 0.9, repetition
 * penalty 1.1, a seed per request, min_length = new tokens on every path; no GreedySearch rows).
 * SPEED_DECODE=beam4: beam search with 4 beams, min_length = new tokens (each request takes 4 rows).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine, type RequestMetrics } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type BuildOptions } from '../../../src/modelbuild/index.ts';
import { GREEDY_STEPS, seededRows, timeSessionRuns } from './common.ts';

const work = process.argv[2] ?? '/tmp/speed';
const PROMPT = Number(process.env.SPEED_PROMPT ?? 128);
const NEW = Number(process.env.SPEED_NEW ?? 128);
const PROVIDER = (process.env.SPEED_PROVIDER ?? 'cuda') as 'cuda' | 'cpu';
const DTYPE = (process.env.SPEED_DTYPE ?? 'fp16') as 'fp16' | 'fp32';
const DECODE = (process.env.SPEED_DECODE ?? 'greedy') as 'greedy' | 'sample' | 'beam4';
const SAMPLING = { temperature: 0.8, runtime_top_k: 50, runtime_top_p: 0.9, repetition_penalty: 1.1 };
const checkpoint = join(work, 'gpt2-124m');
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: checkpoint });

const prompts = (count: number): number[][] => seededRows(count, PROMPT, 50000);

// Time spent inside ONNX Runtime's run, to split the step between the session and everything else.
const inRun = timeSessionRuns();

const rows: Array<Record<string, unknown>> = [];
const save = (): void => writeFileSync(join(work, 'chorus.json'), JSON.stringify({ rows, checkpoint, prompt: PROMPT, new_tokens: NEW, provider: PROVIDER, dtype: DTYPE, decode: DECODE, sampling: SAMPLING }, null, 2));
const paths = (process.env.SPEED_PATHS ?? 'loop,greedy,native,native-graph').split(',') as Array<'loop' | 'greedy' | 'native' | 'native-graph' | 'native-graph-invariant' | 'native-graph-one-step' | 'native-graph-gqa' | 'native-graph-matmul'>;
// The slot decoders other paths compare with: each built with one option changed.
const variants: Record<string, Partial<BuildOptions>> = { 'native-graph-gqa': { slotAttention: 'GroupQueryAttention' }, 'native-graph-matmul': { slotLinear: 'MatMul' } };
for (const flavor of (process.env.SPEED_FLAVORS ?? 'portable,cuda').split(',') as Array<'portable' | 'cuda'>) {
  const dir = join(work, `gpt2-${DTYPE}-${flavor}`);
  buildModel({ source: checkpoint, out: dir, dtype: DTYPE, flavor, greedySearch: true, slotDecoder: flavor === 'cuda' });
  const metrics: RequestMetrics[] = [];
  const onRequestDone = (m: RequestMetrics): void => void metrics.push(m);
  const ortEngine = await OrtEngine.open(dir, { executionProviders: [PROVIDER], maxBatchSize: 64, onRequestDone });
  const natives = new Map<string, NativeEngine>();
  for (const path of paths.filter((p) => p.startsWith('native'))) {
    if (flavor !== 'cuda') continue;
    try {
      const variant = variants[path];
      const at = variant === undefined ? dir : join(work, `gpt2-${DTYPE}-${path}`);
      if (variant !== undefined) buildModel({ source: checkpoint, out: at, dtype: DTYPE, flavor, slotDecoder: true, ...variant });
      natives.set(path, await NativeEngine.open(at, { provider: PROVIDER, maxBatchSize: 64, slotLength: PROMPT + NEW, cudaGraph: path.startsWith('native-graph'), batchInvariant: path === 'native-graph-invariant', greedySteps: GREEDY_STEPS[path], onRequestDone }));
    } catch (error) {
      rows.push({ flavor, path, error: String(error) });
      console.log(`${flavor} ${path}: ${String(error)}`);
    }
  }
  const settings = [
    ['batch 1', 1, false],
    ['batch 8', 8, false],
    ['batch 32', 32, false],
    ['batch 64', 64, false],
    ['64 concurrent streams', 64, true],
  ] as const;
  const maxBatch = Number(process.env.SPEED_MAX_BATCH ?? 64);
  const only = process.env.SPEED_SETTINGS?.split(',');
  // Each batch's ids from the loop, to check the fast path gives the same tokens.
  const loopIds = new Map<number, number[][]>();
  // And the native engine's, to check its CUDA graphs change nothing.
  const nativeIds = new Map<number, number[][]>();
  for (const path of paths) {
    for (const [setting, batch, concurrent] of settings) {
      if (only !== undefined && !only.includes(setting)) continue;
      if (path === 'loop' && batch > maxBatch) continue;
      if (path === 'greedy' && (concurrent || DECODE !== 'greedy')) continue;
      const nativeEngine = natives.get(path);
      if (path.startsWith('native') && nativeEngine === undefined) continue;
      const loop = path === 'loop';
      const engine: Engine = nativeEngine ?? ortEngine;
      const params = (i: number) =>
        DECODE === 'sample'
          ? { ...SAMPLING, random_seed: i, request_output_len: NEW, min_length: NEW }
          : DECODE === 'beam4'
            ? { beam_width: 4, request_output_len: NEW, min_length: NEW }
            : { temperature: 0, request_output_len: NEW, ...(loop ? { min_length: NEW } : {}) };
      const submit = (p: number[], i: number) => lastValueFrom(engine.submit({ inputIds: p, params: params(i), stream: path !== 'greedy' }).pipe(toArray()));
      const run = () => Promise.all(prompts(batch).map((p, i) => (concurrent ? new Promise<void>((resolve) => setTimeout(resolve, i * 2)).then(() => submit(p, i)) : submit(p, i))));
      try {
        // Warm-up: twice for the native engine, whose first runs capture graphs and grow ONNX Runtime's arena.
        await run();
        if (nativeEngine !== undefined) await run();
      } catch (error) {
        rows.push({ flavor, path, setting, batch, error: String(error) });
        console.log(`${flavor} ${path} ${setting}: ${String(error)}`);
        continue;
      }
      metrics.length = 0;
      inRun.ms = 0;
      const profileBefore = nativeEngine?.profile();
      const before = engine.stats();
      const started = performance.now();
      const results = await run();
      const seconds = (performance.now() - started) / 1000;
      const after = engine.stats();
      const tokens = results.reduce((sum, events) => sum + events.length, 0);
      // The loop's steps are its decode steps; the fast path takes as many steps as its longest row.
      const steps = path === 'greedy' ? Math.max(...results.map((events) => events.length)) : after.decodeSteps - before.decodeSteps;
      const ttft = metrics.map((m) => m.timeToFirstTokenMs).sort((a, b) => a - b);
      const ids = results.map((events) => events.map((e) => e.token));
      if (loop && !concurrent) loopIds.set(batch, ids);
      const reference = loopIds.get(batch);
      // The loop runs to min_length; the others may end a row at the end id: compare what they made.
      const same = (rows: number[][] | undefined): number | undefined => rows && ids.filter((row, i) => row.join() === rows[i]!.slice(0, row.length).join()).length;
      // The first native path's ids, to check the others (graphs, runs, attention) change nothing.
      const firstNative = path.startsWith('native') && !concurrent && !nativeIds.has(batch);
      if (firstNative) nativeIds.set(batch, ids);
      const sameAsLoop = {
        ...(!loop && reference !== undefined ? { rows_identical_to_loop: same(reference) } : {}),
        ...(path.startsWith('native') && !concurrent && !firstNative && nativeIds.has(batch) ? { rows_identical_to_native: same(nativeIds.get(batch)) } : {}),
      };
      const row = {
        flavor,
        path,
        setting,
        batch,
        tokens,
        greedy_search_runs: after.greedySearchRuns - before.greedySearchRuns,
        tokens_per_s: tokens / seconds,
        ms_per_step: (seconds * 1000) / Math.max(1, steps),
        ttft_ms_median: ttft[Math.floor(ttft.length / 2)],
        // The native engine: the share inside ONNX Runtime's runs, and inside the addon in all (runs,
        // device argmax, slot copies); the rest is JavaScript and the event loop.
        session_run_share: nativeEngine ? (nativeEngine.profile().sessionMs - profileBefore!.sessionMs) / (seconds * 1000) : inRun.ms / (seconds * 1000),
        ...(nativeEngine ? { native_call_share: (nativeEngine.profile().nativeMs - profileBefore!.nativeMs) / (seconds * 1000) } : {}),
        ...sameAsLoop,
      };
      rows.push(row);
      console.log(JSON.stringify(row));
      save();
    }
  }
  await ortEngine.close();
  for (const engine of natives.values()) await engine.close();
}
save();
