/**
 * Chorus's side of the encoder-decoder speed comparison: t5-small, t5-base and bart-large shapes
 * (seeded weights; seq2seq_hf.py loads the same checkpoints), fp16 on CUDA, source 256 tokens, 64 new
 * tokens (min_length = 64: no early stop), batch 1 and 32 (that many requests submitted together),
 * greedy and beam 4, on each engine of SEQ2SEQ_ENGINES (comma-separated; default
 * native-graph,native,ts): the native engine (src/native, the caches on the GPU; with CUDA graphs or
 * without; native-graph-one-step: one decode step per call, where native-graph runs greedy batches
 * back to back inside the addon until a row stops; native-graph-runs16: at most 16 steps a call;
 * native-graph-matmul: native-graph on slot models built with
 * MatMul projections instead of the addon's Linear and the encoder's attention as MatMul and Softmax;
 * native-graph-encoder-matmul: only the encoder's attention so) and the TypeScript engine (Seq2SeqEngine over onnxruntime-node, batches of SEQ2SEQ_TS_BATCHES,
 * default 1,32). Reports tokens/s (returned sequences' tokens), ms per decode step and time to first
 * token; profile: the share of the time inside the session's runs (and for the native engine inside
 * the addon's calls in all).
 * SEQ2SEQ_SEARCHES: 'greedy,beam 4' (default) or either. SEQ2SEQ_BATCHES: the native engines' batches
 * (default 1,32). SEQ2SEQ_SOURCE: the source's length in tokens (default 256; seq2seq_hf.py takes it from
 * the results file).
 * Usage: node --import tsx bench/gpu/speed/seq2seq.ts <work-dir> [model...]  -> <work-dir>/seq2seq-chorus.json
 *   models: t5-small t5-base bart-large (default: all)
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, Seq2SeqEngine, type Engine, type RequestMetrics, type SamplingParams } from '../../../src/generation/index.ts';
import { buildModel, type BuildOptions } from '../../../src/modelbuild/index.ts';
import { envCounts, GREEDY_STEPS, SEQ2SEQ_MODELS, seq2seqModel, seq2seqSources, timeSessionRuns } from './common.ts';

const [SOURCE = 256] = envCounts('SEQ2SEQ_SOURCE', '256');
const NEW = 64;

const work = process.argv[2] ?? '/tmp/speed';
const names = process.argv.slice(3).length > 0 ? process.argv.slice(3) : Object.keys(SEQ2SEQ_MODELS);

/** Engines on slot models built otherwise than by default, with the build options that make them. */
const VARIANTS: Record<string, Partial<BuildOptions>> = {
  'native-graph-matmul': { slotLinear: 'MatMul', encoderAttention: 'MatMul' },
  'native-graph-encoder-matmul': { encoderAttention: 'MatMul' },
};

const inRun = timeSessionRuns();
const engineNames = (process.env.SEQ2SEQ_ENGINES ?? 'native-graph,native,ts').split(',');
const tsBatches = envCounts('SEQ2SEQ_TS_BATCHES', '1,32');
const nativeBatches = envCounts('SEQ2SEQ_BATCHES', '1,32');
const searches = (process.env.SEQ2SEQ_SEARCHES ?? 'greedy,beam 4').split(',');

const file = join(work, 'seq2seq-chorus.json');
const saved = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { rows: Array<Record<string, unknown>>; checkpoints: Record<string, string>; source?: number }) : { rows: [], checkpoints: {} };
// Rows of other models are kept only when they ran from sources of this length.
const rows = (saved.source ?? 256) === SOURCE ? saved.rows.filter((row) => !names.includes(String(row.model))) : [];
const checkpoints = saved.checkpoints;
for (const name of names) {
  const { checkpoint, dir, eos } = seq2seqModel(work, name);
  checkpoints[name] = checkpoint;
  /** The model directory an engine runs: the default build, or a variant's (built once). */
  const dirFor = (engineName: string): string => {
    const variant = VARIANTS[engineName];
    if (variant === undefined) return dir;
    const out = join(work, `${name}-fp16-${engineName.replace(/^native-graph-/, '')}`);
    if (!existsSync(join(out, 'onnx', 'decoder_model_slots.onnx'))) buildModel({ source: checkpoint, out, dtype: 'fp16', slotDecoder: true, ...variant });
    return out;
  };
  for (const engineName of engineNames) {
    const metrics: RequestMetrics[] = [];
    const onRequestDone = (m: RequestMetrics): void => void metrics.push(m);
    let engine: Engine;
    let sessionMs: () => number;
    let nativeMs = (): number => 0;
    if (engineName === 'ts') {
      engine = await Seq2SeqEngine.open(dir, { executionProviders: ['cuda'], maxBatchSize: 128, onRequestDone });
      sessionMs = () => inRun.ms;
    } else {
      const native = await NativeEngine.open(dirFor(engineName), { provider: 'cuda', maxBatchSize: 128, slotLength: NEW + 1, sourceLength: SOURCE, cudaGraph: engineName.startsWith('native-graph'), greedySteps: GREEDY_STEPS[engineName], onRequestDone });
      engine = native;
      sessionMs = () => native.profile().sessionMs;
      nativeMs = () => native.profile().nativeMs;
    }
    for (const [search, params] of [
      ['greedy', { temperature: 0 }],
      ['beam 4', { beam_width: 4, temperature: 1 }],
    ] as Array<[string, SamplingParams]>) {
      if (!searches.includes(search)) continue;
      for (const batch of engineName === 'ts' ? tsBatches : nativeBatches) {
        const run = (count: number) =>
          Promise.all(seq2seqSources(count, SOURCE, eos).map((s) => lastValueFrom(engine.submit({ inputIds: s, params: { ...params, request_output_len: NEW, min_length: NEW }, stream: false }).pipe(toArray()))));
        // Warm-up (the native engine's captured graphs, one per batch size, and ONNX Runtime's arena: twice).
        await run(engineName === 'ts' ? 1 : batch);
        if (engineName !== 'ts') await run(batch);
        metrics.length = 0;
        inRun.ms = 0;
        const sessionBefore = sessionMs();
        const nativeBefore = nativeMs();
        const before = engine.stats().decodeSteps;
        const started = performance.now();
        const results = await run(batch);
        const seconds = (performance.now() - started) / 1000;
        const steps = engine.stats().decodeSteps - before;
        const tokens = results.reduce((sum, events) => sum + events.filter((e) => (e.sequence ?? 0) === 0).length, 0);
        const ttft = metrics.map((m) => m.timeToFirstTokenMs).sort((a, b) => a - b);
        const row = {
          model: name,
          engine: engineName,
          search,
          batch,
          tokens,
          tokens_per_s: tokens / seconds,
          ms_per_step: (seconds * 1000) / Math.max(1, steps),
          decode_steps: steps,
          ttft_ms_median: ttft[Math.floor(ttft.length / 2)],
          session_run_share: (sessionMs() - sessionBefore) / (seconds * 1000),
          // The native engine: the share inside the addon's calls (session runs, sampler, copies); the rest is JavaScript and waiting.
          ...(engineName === 'ts' ? {} : { native_call_share: (nativeMs() - nativeBefore) / (seconds * 1000) }),
        };
        rows.push(row);
        process.stdout.write(`${JSON.stringify(row)}\n`);
        writeFileSync(file, JSON.stringify({ rows, checkpoints, source: SOURCE, new_tokens: NEW }, null, 2));
      }
    }
    await engine.close();
  }
}
writeFileSync(file, JSON.stringify({ rows, checkpoints, source: SOURCE, new_tokens: NEW }, null, 2));
