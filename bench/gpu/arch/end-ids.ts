/**
 * Several end ids on CUDA: the llama3, phi3 and gemma2 fixtures of test/fixtures/arch with two end ids
 * each (test/helpers/end-ids.ts: in config.json, or in generation_config.json over config.json's one),
 * built fp32 with the slot decoder, their 8 prompts greedy (64 tokens, submitted together, no request
 * end id) through the native engine on CUDA: slots with CUDA graphs (the device greedy run), the paged
 * cache, and the continuous core (or the same on the CPU, without graphs). Each prompt must stop where the golden greedy run first meets either
 * end id (finish reason end_id), or run to the length. Prints a table; writes <out-dir>/end-ids.json.
 * Usage: node --import tsx bench/gpu/arch/end-ids.ts <work-dir> <out-dir> [cuda|cpu]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type Engine } from '../../../src/generation/index.ts';
import { buildModel } from '../../../src/modelbuild/index.ts';
import { archFixture, readArchGolden } from '../../../test/helpers/arch-golden.ts';
import { END_ID_CASES, expectedRuns, writeEndIdSource } from '../../../test/helpers/end-ids.ts';

const [work = '/tmp/end-ids', out = join(work, 'out'), deviceArg = 'cuda'] = process.argv.slice(2);
if (deviceArg !== 'cuda' && deviceArg !== 'cpu') throw new Error(`the device is cuda or cpu, got '${deviceArg}'`);
const provider: 'cuda' | 'cpu' = deviceArg;
// fp32 means fp32 on the GPU too: no TF32 matrix products.
if (provider === 'cuda') process.env.NVIDIA_TF32_OVERRIDE ??= '0';
mkdirSync(out, { recursive: true });
const common = { provider, maxBatchSize: 8, slotLength: 128, cudaGraph: provider === 'cuda', ...(provider === 'cuda' ? { cudaOptions: { use_tf32: 0 } } : {}) };
const ENGINES: Array<[string, (dir: string) => Promise<Engine>]> = [
  ['slots', (dir) => NativeEngine.open(dir, common)],
  ['paged', (dir) => NativeEngine.open(dir, { ...common, pagedCache: true, blockSize: 16 })],
  ['continuous', (dir) => NativeEngine.open(dir, { ...common, continuous: true })],
];

const rows: Array<Record<string, unknown>> = [];
for (const c of END_ID_CASES) {
  const golden = readArchGolden(c.family);
  if (golden === undefined) continue;
  const want = expectedRuns(golden, c.endIds);
  const source = join(work, `${c.family}-source`);
  const built = join(work, `${c.family}-fp32`);
  writeEndIdSource(archFixture(c.family), source, c);
  buildModel({ source, out: built, flavor: 'cuda', slotDecoder: true });
  for (const [name, open] of ENGINES) {
    const row: Record<string, unknown> = { family: c.family, endIds: c.endIds, where: c.where, engine: name, provider };
    try {
      const engine = await open(built);
      try {
        const got = await Promise.all(
          golden.prompts.map(async (prompt, p) => {
            const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: golden.greedy[p]!.length } }).pipe(toArray()));
            return { ids: events.map((e) => e.token), reason: events.at(-1)?.finishReason };
          }),
        );
        row.prompts = want.length;
        row.equal = got.filter((g, p) => JSON.stringify(g) === JSON.stringify(want[p])).length;
        row.stopped = got.filter((g) => g.reason === 'end_id').length;
        row.expectedStopped = want.filter((w) => w.reason === 'end_id').length;
        row.ok = row.equal === want.length;
      } finally {
        await engine.close();
      }
    } catch (error) {
      row.error = String(error).split('\n')[0];
      row.ok = false;
    }
    rows.push(row);
    writeFileSync(join(out, 'end-ids.json'), JSON.stringify({ rows }, null, 2));
  }
}
process.stdout.write(`${'family'.padEnd(8)} ${'engine'.padEnd(14)} ${'equal'.padStart(6)} ${'stopped'.padStart(8)}  ok\n`);
for (const r of rows) {
  const equal = r.error === undefined ? `${String(r.equal)}/${String(r.prompts)}` : 'error';
  const stopped = r.error === undefined ? `${String(r.stopped)}/${String(r.expectedStopped)}` : '-';
  process.stdout.write(`${String(r.family).padEnd(8)} ${String(r.engine).padEnd(14)} ${equal.padStart(6)} ${stopped.padStart(8)}  ${r.ok ? 'yes' : 'NO'}${r.error === undefined ? '' : `  ${String(r.error).slice(0, 120)}`}\n`);
}
