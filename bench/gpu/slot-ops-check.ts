/**
 * The decoder-only slot decoder's operators on CUDA: GPT-2 124M (seeded random weights) built three
 * times, with the defaults (the addon's DecoderSlotAttention; in fp16 the addon's Linear projections),
 * with GroupQueryAttention, and with MatMul projections; each run by the native engine, beside the
 * TypeScript engine (OrtEngine on CUDA) on the first build; greedy (64 tokens) and beam 4 (32) on 8
 * prompts of 5 to 124 tokens, in fp32 and fp16. Prints how many tokens each agrees on with the default build.
 *   source /root/gpu-env/env.sh && node --import tsx bench/gpu/slot-ops-check.ts
 * CHECK_DTYPES=fp32|fp16 picks one; CHECK_GRAPH=0 runs the native engine without CUDA graphs;
 * CHECK_BATCH=1 submits the prompts one at a time (single-row steps: the Linear kernel's own path).
 */
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine, type SamplingParams } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type BuildOptions } from '../../src/modelbuild/index.ts';

const work = process.env.CHECK_DIR ?? '/tmp/slot-ops-check';
const ckpt = join(work, 'ckpt');
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: ckpt });
const dtypes = (process.env.CHECK_DTYPES ?? 'fp32,fp16').split(',') as Array<'fp32' | 'fp16'>;
const oneByOne = process.env.CHECK_BATCH === '1';
const prompts = Array.from({ length: 8 }, (_, i) => Array.from({ length: 5 + 17 * i }, (_, j) => (i * 7919 + j * 104729) % 50000));
const ids = async (engine: Engine, params: SamplingParams): Promise<number[][]> => {
  const one = async (inputIds: number[]): Promise<number[]> =>
    (await lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))).filter((e) => (e.sequence ?? 0) === 0).map((e) => e.token);
  if (!oneByOne) return Promise.all(prompts.map(one));
  const out: number[][] = [];
  for (const p of prompts) out.push(await one(p));
  return out;
};
const same = (a: number[][], b: number[][]): string => `${a.reduce((n, row, i) => n + row.filter((t, j) => t === b[i]![j]).length, 0)}/${a.reduce((n, row) => n + row.length, 0)}`;
const variants: Array<[string, Partial<BuildOptions>]> = [
  ['GroupQueryAttention', { slotAttention: 'GroupQueryAttention' }],
  ['MatMul projections', { slotLinear: 'MatMul' }],
];
for (const dtype of dtypes) {
  const dir = join(work, dtype);
  buildModel({ source: ckpt, out: dir, dtype, flavor: 'cuda', slotDecoder: true });
  const cudaGraph = process.env.CHECK_GRAPH !== '0';
  const open = (at: string): Promise<NativeEngine> => NativeEngine.open(at, { provider: 'cuda', maxBatchSize: 8, cudaGraph, slotLength: 256 });
  const native = await open(dir);
  const others = await Promise.all(
    variants.map(async ([name, options]) => {
      const at = join(work, `${dtype}-${name.split(' ')[0]!.toLowerCase()}`);
      buildModel({ source: ckpt, out: at, dtype, flavor: 'cuda', slotDecoder: true, ...options });
      return [name, await open(at)] as const;
    }),
  );
  const ts = await OrtEngine.open(dir, { executionProviders: ['cuda'], maxBatchSize: 8, greedySearch: false });
  for (const [name, params] of [['greedy 64', { temperature: 0, request_output_len: 64 }], ['beam 4, 32', { beam_width: 4, request_output_len: 32 }]] as const) {
    const a = await ids(native, params);
    const parts = [`vs the TypeScript engine ${same(a, await ids(ts, params))}`];
    for (const [other, engine] of others) {
      const b = await ids(engine, params).catch((error: unknown) => {
        console.log(`${dtype} ${name}: the ${other} build failed: ${String(error).slice(0, 300)}`);
        return a.map(() => [] as number[]);
      });
      parts.push(`vs ${other} ${same(a, b)}`);
    }
    console.log(`${dtype} ${name}${oneByOne ? ' (one prompt at a time)' : ''}: the default build ${parts.join(', ')}`);
  }
  await Promise.all([native, ts, ...others.map(([, e]) => e)].map((e) => e.close()));
}
