/**
 * A timeline of the native engine's calls into the addon for one encoder-decoder batch: each call's
 * start and end as JavaScript sees them, with the time inside the addon and inside ONNX Runtime's runs,
 * so that the gaps (JavaScript between calls) show. The batch runs three times; the third is printed.
 *   source /root/gpu-env/env.sh && node --import tsx bench/gpu/profile/calls.ts <work-dir> [model] [batch]
 *   model: t5-small, t5-base, bart-large (default); batch default 32; greedy, source 256, 64 new tokens.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { SEQ2SEQ_MODELS, seededRows } from '../speed/common.ts';

const work = process.argv[2] ?? '/tmp/calls';
const model = process.argv[3] ?? 'bart-large';
const batch = Number(process.argv[4] ?? 32);
const checkpoint = join(work, `${model}-ckpt`);
const dir = join(work, `${model}-fp16`);
if (!existsSync(join(checkpoint, 'config.json'))) makeCheckpoint({ ...SEQ2SEQ_MODELS[model]!, seed: 1, out: checkpoint });
let t = performance.now();
if (!existsSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))) buildModel({ source: checkpoint, out: dir, dtype: 'fp16', slotDecoder: true });
console.log(`build: ${(performance.now() - t).toFixed(0)} ms`);
const eos = Number((JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8')) as { eos_token_id: number }).eos_token_id);
t = performance.now();
const engine = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 128, slotLength: 65, sourceLength: 256, cudaGraph: true, greedySteps: 16 });
console.log(`open: ${(performance.now() - t).toFixed(0)} ms`);
const holder = engine as unknown as { decoder: Record<string, unknown> };
const real = holder.decoder;
const log: Array<[string, number, number, number, number]> = [];
let origin = 0;
const stat = (k: string): number => real[k] as number;
holder.decoder = new Proxy(real, {
  get(target, prop) {
    const value = Reflect.get(target, prop) as unknown;
    if (typeof value !== 'function') return value;
    const name = String(prop);
    if (!['encode', 'decode', 'decodeGreedy', 'decodeBeams', 'copySlots', 'prefill'].includes(name)) return (value as (...a: unknown[]) => unknown).bind(target);
    return async (...args: unknown[]) => {
      const callBefore = stat('callMs');
      const sessionBefore = stat('sessionMs');
      const start = performance.now() - origin;
      const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      log.push([name, start, performance.now() - origin, stat('callMs') - callBefore, stat('sessionMs') - sessionBefore]);
      return result;
    };
  },
});
const sources = seededRows(batch, 255, 30000).map((row) => [...row, eos]);
const run = () => Promise.all(sources.map((s) => lastValueFrom(engine.submit({ inputIds: s, params: { temperature: 0, request_output_len: 64, min_length: 64 }, stream: false }).pipe(toArray()))));
for (let i = 0; i < 3; i++) {
  log.length = 0;
  origin = performance.now();
  await run();
  const wall = performance.now() - origin;
  console.log(`run ${i}: wall ${wall.toFixed(1)} ms, ${((batch * 64) / wall * 1000).toFixed(0)} tok/s`);
  if (i === 2) for (const [n, s, e, c, se] of log) console.log(`  ${n.padEnd(13)} ${s.toFixed(2).padStart(8)} -> ${e.toFixed(2).padStart(8)}  (js ${(e - s).toFixed(2)}, addon ${c.toFixed(2)}, session ${se.toFixed(2)})`);
}
await engine.close();
