/**
 * The decoder-only slot decoder's attention on CUDA: GPT-2 124M (seeded random weights) built twice, with
 * the addon's DecoderSlotAttention (the default) and with GroupQueryAttention, each run by the native
 * engine, beside the TypeScript engine (OrtEngine on CUDA) on the first build; greedy (64 tokens) and beam 4
 * (32) on 8 prompts of 5 to 124 tokens, in fp32 and fp16. Prints how many tokens agree.
 *   source /root/gpu-env/env.sh && node --import tsx bench/gpu/slot-attention-check.ts
 * CHECK_DTYPES=fp32|fp16 picks one; CHECK_GRAPH=0 runs the native engine without CUDA graphs.
 */
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, type Engine, type SamplingParams } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';

const work = process.env.CHECK_DIR ?? '/tmp/slot-attention-check';
const ckpt = join(work, 'ckpt');
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: ckpt });
const dtypes = (process.env.CHECK_DTYPES ?? 'fp32,fp16').split(',') as Array<'fp32' | 'fp16'>;
const prompts = Array.from({ length: 8 }, (_, i) => Array.from({ length: 5 + 17 * i }, (_, j) => (i * 7919 + j * 104729) % 50000));
const ids = async (engine: Engine, params: SamplingParams): Promise<number[][]> =>
  (await Promise.all(prompts.map((inputIds) => lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))))).map((events) => events.filter((e) => (e.sequence ?? 0) === 0).map((e) => e.token));
const same = (a: number[][], b: number[][]): string => `${a.reduce((n, row, i) => n + row.filter((t, j) => t === b[i]![j]).length, 0)}/${a.reduce((n, row) => n + row.length, 0)}`;
for (const dtype of dtypes) {
  const dir = join(work, dtype);
  const gqaDir = join(work, `${dtype}-gqa`);
  buildModel({ source: ckpt, out: dir, dtype, flavor: 'cuda', slotDecoder: true });
  buildModel({ source: ckpt, out: gqaDir, dtype, flavor: 'cuda', slotDecoder: true, slotAttention: 'GroupQueryAttention' });
  const cudaGraph = process.env.CHECK_GRAPH !== '0';
  const native = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 8, cudaGraph, slotLength: 256 });
  const gqa = await NativeEngine.open(gqaDir, { provider: 'cuda', maxBatchSize: 8, cudaGraph, slotLength: 256 });
  const ts = await OrtEngine.open(dir, { executionProviders: ['cuda'], maxBatchSize: 8, greedySearch: false });
  for (const [name, params] of [['greedy 64', { temperature: 0, request_output_len: 64 }], ['beam 4, 32', { beam_width: 4, request_output_len: 32 }]] as const) {
    const a = await ids(native, params);
    console.log(`${dtype} ${name}: addon attention ran`);
    const b = await ids(gqa, params).catch((error: unknown) => {
      console.log(`${dtype} ${name}: GroupQueryAttention build failed: ${String(error).slice(0, 300)}`);
      return a.map(() => [] as number[]);
    });
    const c = await ids(ts, params);
    console.log(`${dtype} ${name}: addon attention vs GroupQueryAttention ${same(a, b)}, vs TypeScript engine ${same(a, c)}; GroupQueryAttention vs TypeScript engine ${same(b, c)}`);
  }
  await native.close();
  await gqa.close();
  await ts.close();
}
