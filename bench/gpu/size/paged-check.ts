/**
 * The native engine's paged cache and bf16 on a GPU, in under three minutes: seeded Llama-shaped
 * checkpoints built in fp32, fp16 and bf16 (bf16 where the builder writes it), each run greedily on
 * CUDA through the paged decoder (PagedAttention) and through the contiguous slots, 8 prompts of
 * different lengths at once, against the TypeScript engine in fp32 on the CPU. Prints a table of
 * identical ids and tokens/s, the paged cache's size as the engine logged it, and writes JSON.
 * Usage (GPU host, after npm run build:native):
 *   node --import tsx bench/gpu/size/paged-check.ts [out-dir]    (default bench/results)
 * PAGED_SHAPES=tiny skips the Qwen2-0.5B-shaped Llama (heads of 64, 7 query heads per key head).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type BuildOptions, type BuildResult, type CheckpointSize } from '../../../src/modelbuild/index.ts';

const out = process.argv[2] ?? 'bench/results';
const work = '/tmp/chorus-paged-check';
mkdirSync(out, { recursive: true });
const shapes: Array<{ name: string; size: CheckpointSize }> = [{ name: 'llama-tiny', size: 'tiny' }];
if (process.env.PAGED_SHAPES !== 'tiny') shapes.push({ name: 'llama-0.5b', size: 'real' });
// bf16 builds come with the builder's bf16 (GraphBuilder 'bfloat16'); without it the row says why.
const build = buildModel as (options: Omit<BuildOptions, 'dtype'> & { dtype: string }) => BuildResult;
const prompts = Array.from({ length: 8 }, (_, p) => Array.from({ length: 3 + p * 9 }, (_, i) => (p * 131 + i * 17 + 3) % 500));
const NEW_TOKENS = 48;

/** Every prompt at once, greedy; the ids and tokens/s. */
async function greedyIds(engine: Engine): Promise<{ ids: number[][]; tokensPerSecond: number }> {
  const started = performance.now();
  const ids = await Promise.all(
    prompts.map(async (prompt) => (await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: NEW_TOKENS, end_id: 499 } }).pipe(toArray()))).map((e) => e.token)),
  );
  return { ids, tokensPerSecond: (prompts.length * NEW_TOKENS) / ((performance.now() - started) / 1000) };
}

const same = (a: number[][], b: number[][]): string => `${a.flat().filter((id, i) => id === b.flat()[i]).length}/${a.flat().length}`;
const rows: Array<Record<string, unknown>> = [];
for (const shape of shapes) {
  const checkpoint = join(work, shape.name);
  makeCheckpoint({ arch: 'llama', size: shape.size, seed: 21, out: checkpoint });
  const fp32 = `${checkpoint}-fp32`;
  build({ source: checkpoint, out: fp32, flavor: 'cuda', slotDecoder: true, dtype: 'fp32' });
  const reference = await OrtEngine.open(fp32, { maxBatchSize: 8, greedySearch: false });
  const { ids: want } = await greedyIds(reference);
  await reference.close();
  for (const dtype of ['fp32', 'fp16', 'bf16']) {
    const dir = `${checkpoint}-${dtype}`;
    try {
      if (dtype !== 'fp32') build({ source: checkpoint, out: dir, flavor: 'cuda', slotDecoder: true, dtype });
    } catch (error) {
      rows.push({ model: shape.name, dtype, error: `not built: ${(error as Error).message.split('\n')[0]}` });
      console.log(`${shape.name.padEnd(11)} ${dtype}  not built: ${(error as Error).message.split('\n')[0]}`);
      continue;
    }
    const results: Record<string, { ids: number[][]; tokensPerSecond: number }> = {};
    const logs: string[] = [];
    const graphs: Record<string, string> = {};
    for (const paged of [false, true]) {
      const path = paged ? 'paged' : 'slots';
      try {
        // A step that cannot be captured turns that engine's graphs off (it says so), and no other engine's.
        const log = (line: string): void => {
          logs.push(line);
          if (line.startsWith('CUDA graphs off')) graphs[path] = line;
        };
        const engine = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 8, cudaGraph: true, pagedCache: paged, log });
        await greedyIds(engine); // the CUDA graphs captured
        results[path] = await greedyIds(engine);
        await engine.close();
      } catch (error) {
        rows.push({ model: shape.name, dtype, path, error: (error as Error).message.split('\n')[0] });
        console.log(`${shape.name.padEnd(11)} ${dtype}  ${path}: ${(error as Error).message.split('\n')[0]}`);
      }
    }
    const { slots, paged } = results;
    const row = {
      model: shape.name,
      dtype,
      pagedVsTypeScriptFp32: paged ? same(paged.ids, want) : undefined,
      slotsVsTypeScriptFp32: slots ? same(slots.ids, want) : undefined,
      pagedVsSlots: paged && slots ? same(paged.ids, slots.ids) : undefined,
      pagedTokensPerSecond: paged ? Math.round(paged.tokensPerSecond) : undefined,
      slotsTokensPerSecond: slots ? Math.round(slots.tokensPerSecond) : undefined,
      cache: logs.find((line) => line.startsWith('paged cache')),
      graphsOff: Object.keys(graphs).length > 0 ? graphs : undefined,
    };
    rows.push(row);
    console.log(
      `${shape.name.padEnd(11)} ${dtype}  paged vs TS fp32 ${row.pagedVsTypeScriptFp32 ?? '-'}  slots vs TS fp32 ${row.slotsVsTypeScriptFp32 ?? '-'}  paged vs slots ${row.pagedVsSlots ?? '-'}  tok/s paged ${row.pagedTokensPerSecond ?? '-'} slots ${row.slotsTokensPerSecond ?? '-'}`,
    );
    if (row.cache !== undefined) console.log(`            ${row.cache}`);
    for (const [path, line] of Object.entries(graphs)) console.log(`            ${path}: ${line}`);
  }
}
// The real shape's long rows (many blocks, positions split over blocks of threads) and its cache
// at 64 sequences of 4k: paged against the slots, fp16.
const real = shapes.find((shape) => shape.size === 'real');
if (real !== undefined) {
  const dir = join(work, `${real.name}-fp16`);
  const long = Array.from({ length: 4 }, (_, p) => Array.from({ length: 700 + 150 * p }, (_, i) => (p * 37 + i * 11 + 5) % 500));
  const longIds = async (engine: Engine): Promise<number[][]> =>
    Promise.all(long.map(async (prompt) => (await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 24, end_id: 499 } }).pipe(toArray()))).map((e) => e.token)));
  const ids: number[][][] = [];
  for (const paged of [false, true]) {
    const engine = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 8, slotLength: 2048, cudaGraph: true, pagedCache: paged });
    ids.push(await longIds(engine));
    await engine.close();
  }
  const longRow = { model: real.name, dtype: 'fp16', prompts: long.map((p) => p.length), pagedVsSlots: same(ids[1]!, ids[0]!) };
  rows.push(longRow);
  console.log(`${real.name.padEnd(11)} fp16  prompts of 700-1150 tokens: paged vs slots ${longRow.pagedVsSlots}`);
  const logs: string[] = [];
  const wide = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 64, slotLength: 4096, cudaGraph: true, pagedCache: true, log: (line) => logs.push(line) });
  await wide.close();
  rows.push({ model: real.name, dtype: 'fp16', slots: 64, slotLength: 4096, cache: logs.join('; ') });
  console.log(`${real.name.padEnd(11)} fp16  64 x 4096: ${logs.join('; ')}`);
}
const file = join(out, `paged-check-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(file, JSON.stringify({ prompts: prompts.length, newTokens: NEW_TOKENS, rows }, null, 2));
console.log(`wrote ${file}`);
