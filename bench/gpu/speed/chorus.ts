/**
 * Chorus's side of the GPU speed comparison: GPT-2 124M (seeded weights, the checkpoint hf.py loads
 * too), fp16 on CUDA, greedy, prompt 128, 128 new tokens (no early stop), at batch 1, 8, 32, 64 (that
 * many requests submitted together; the engine batches them) and under 64 concurrent streaming
 * requests. Both builder flavors. Reports ms per decode step, tokens/s and time to first token;
 * profile: time inside session.run against the rest (host copies of the cache, JavaScript).
 * Usage: node --import tsx bench/gpu/speed/chorus.ts <work-dir>  -> <work-dir>/chorus.json
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { lastValueFrom, toArray } from 'rxjs';
import { OrtEngine, type RequestMetrics } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';

const work = process.argv[2] ?? '/tmp/speed';
const PROMPT = 128;
const NEW = 128;
const checkpoint = join(work, 'gpt2-124m');
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: checkpoint });

function prompts(count: number): number[][] {
  let state = 777;
  return Array.from({ length: count }, () => Array.from({ length: PROMPT }, () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % 50000));
}

// Time spent inside ONNX Runtime's run, to split the step between the session and everything else.
let inRun = 0;
const proto = (ort.InferenceSession as unknown as { prototype: ort.InferenceSession }).prototype;
const original = proto.run;
proto.run = async function (this: ort.InferenceSession, ...args: Parameters<typeof original>) {
  const started = performance.now();
  try {
    return await original.apply(this, args);
  } finally {
    inRun += performance.now() - started;
  }
} as typeof original;

const rows: Array<Record<string, unknown>> = [];
for (const flavor of (process.env.SPEED_FLAVORS ?? 'portable,cuda').split(',') as Array<'portable' | 'cuda'>) {
  const dir = join(work, `gpt2-fp16-${flavor}`);
  buildModel({ source: checkpoint, out: dir, dtype: 'fp16', flavor });
  const metrics: RequestMetrics[] = [];
  const engine = await OrtEngine.open(dir, { executionProviders: ['cuda'], maxBatchSize: 64, onRequestDone: (m) => metrics.push(m) });
  const settings = [['batch 1', 1, false], ['batch 8', 8, false], ['batch 32', 32, false], ['batch 64', 64, false], ['64 concurrent streams', 64, true]] as const;
  // SPEED_MAX_BATCH limits the rows run (the larger ones take minutes while the engine copies the cache through the host).
  const maxBatch = Number(process.env.SPEED_MAX_BATCH ?? 64);
  for (const [setting, batch, streaming] of settings.filter(([, b]) => b <= maxBatch)) {
    const run = () =>
      Promise.all(
        prompts(batch).map((p, i) =>
          streaming
            ? new Promise<void>((resolve) => setTimeout(resolve, i * 2)).then(() => lastValueFrom(engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW, min_length: NEW } }).pipe(toArray())))
            : lastValueFrom(engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW, min_length: NEW } }).pipe(toArray())),
        ),
      );
    try {
      await run(); // warm-up
    } catch (error) {
      rows.push({ flavor, setting, batch, error: String(error) });
      console.log(`${flavor} ${setting}: ${String(error)}`);
      continue;
    }
    metrics.length = 0;
    inRun = 0;
    const steps0 = engine.stats().decodeSteps;
    const started = performance.now();
    await run();
    const seconds = (performance.now() - started) / 1000;
    const steps = engine.stats().decodeSteps - steps0;
    const ttft = metrics.map((m) => m.timeToFirstTokenMs).sort((a, b) => a - b);
    const row = {
      flavor,
      setting,
      batch,
      tokens_per_s: (batch * NEW) / seconds,
      ms_per_step: (seconds * 1000) / Math.max(1, steps),
      ttft_ms_median: ttft[Math.floor(ttft.length / 2)],
      session_run_share: inRun / (seconds * 1000),
    };
    rows.push(row);
    console.log(JSON.stringify(row));
    writeFileSync(join(work, 'chorus.json'), JSON.stringify({ rows, checkpoint }, null, 2));
  }
  await engine.close();
}
writeFileSync(join(work, 'chorus.json'), JSON.stringify({ rows, checkpoint }, null, 2));
