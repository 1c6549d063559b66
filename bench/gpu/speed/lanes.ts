/**
 * Does splitting one batch over several native engines on one GPU pay? 32 greedy requests of an
 * encoder-decoder (fp16, source 256, 64 new tokens, min_length 64) go to K engines (K of LANES), each
 * with its own session, CUDA stream, cache and graphs, 32 / K requests each, all at once; their steps
 * then run side by side on the GPU. Reports the best of three timed rounds per K (after warm-ups).
 * Usage: node --import tsx bench/gpu/speed/lanes.ts <work-dir> [model]  -> <work-dir>/lanes.json
 *   model: t5-small, t5-base or bart-large (default); LANES=1,2,3,4,1 (default)
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../../src/generation/index.ts';
import { envCounts, seq2seqModel, seq2seqSources } from './common.ts';

const SOURCE = 256;
const NEW = 64;
const BATCH = 32;

const work = process.argv[2] ?? '/tmp/speed';
const name = process.argv[3] ?? 'bart-large';
const lanesList = envCounts('LANES', '1,2,3,4,1');
const { dir, eos } = seq2seqModel(work, name);
const sources = seq2seqSources(BATCH, SOURCE, eos);

const runOn = (engine: NativeEngine, batch: number[][]): Promise<number[][]> =>
  Promise.all(
    batch.map((s) =>
      lastValueFrom(engine.submit({ inputIds: s, params: { temperature: 0, request_output_len: NEW, min_length: NEW }, stream: false }).pipe(toArray())).then((events) =>
        events.map((e) => e.token),
      ),
    ),
  );

const rows: Array<Record<string, unknown>> = [];
for (const lanes of lanesList) {
  const per = Math.ceil(BATCH / lanes);
  const engines: NativeEngine[] = [];
  for (let i = 0; i < lanes; i++) engines.push(await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: per, slotLength: NEW + 1, sourceLength: SOURCE, cudaGraph: true }));
  const share = (i: number): number[][] => sources.slice(i * per, (i + 1) * per);
  // Warm-up: each engine alone (its graphs captured), then all together.
  for (const [i, engine] of engines.entries()) await runOn(engine, share(i));
  await Promise.all(engines.map((engine, i) => runOn(engine, share(i))));
  const ms: number[] = [];
  let tokens = 0;
  for (let round = 0; round < 3; round++) {
    const started = performance.now();
    const outputs = (await Promise.all(engines.map((engine, i) => runOn(engine, share(i))))).flat();
    ms.push(performance.now() - started);
    tokens = outputs.reduce((sum, ids) => sum + ids.length, 0);
  }
  const row = { model: name, lanes, per_lane: per, tokens, ms, tokens_per_s: tokens / (Math.min(...ms) / 1000) };
  rows.push(row);
  console.log(`${name}: ${lanes} engine(s) of ${per} rows: ${Math.round(row.tokens_per_s)} tokens/s (rounds ${ms.map((t) => t.toFixed(1)).join(', ')} ms)`);
  for (const engine of engines) await engine.close();
}
writeFileSync(join(work, 'lanes.json'), JSON.stringify({ rows, source: SOURCE, new_tokens: NEW, batch: BATCH }, null, 2));
