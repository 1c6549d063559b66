/**
 * Chorus's side of the 512-token parity check, and the comparison: a make.py checkpoint built for the
 * native engine in each dtype parity.py ran, decoded greedily on the GPU (CUDA graphs on) through the
 * caches asked for, against transformers' ids in the same dtype.
 * Counting: each prompt decodes from transformers' own prefix. Where Chorus's id differs from
 * transformers' (a divergence), the step counts as unequal, and the prompt goes on from transformers'
 * prefix through that step (a new request: prompt plus transformers' ids so far), so that one early
 * divergence does not decide the other 500 steps. Each divergence is shown with transformers' gap
 * between its best two scores at that step, and between its id and Chorus's (near-tie: the top two
 * within 1e-4). The first divergence of each prompt, decoding freely, is reported too.
 * Usage: node --import tsx bench/gpu/llama/parity.ts <checkpoint> <work-dir> <name> <reference.json> <out.json>
 * Knobs: PARITY_CACHES_FP16=slots,paged  PARITY_CACHES_FP32=paged  (fp32's slot decoder runs
 *   GroupQueryAttention, which ONNX Runtime has on the CPU only in fp32)  PARITY_MAX_RESYNCS=32
 *   PARITY_PROVIDER=cpu (a smoke test of the script on a tiny fp32 checkpoint)
 *   PARITY_SLOT_ATTENTION=PagedAttention (the slot decoder's attention; the paged cache always takes
 *   PagedAttention)
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../../src/generation/index.ts';
import { buildModel, type BuildOptions } from '../../../src/modelbuild/index.ts';

const [checkpoint, work, name, referencePath, outPath] = process.argv.slice(2);
if (checkpoint === undefined || work === undefined || name === undefined || referencePath === undefined || outPath === undefined) {
  throw new Error('usage: parity.ts <checkpoint> <work-dir> <name> <reference.json> <out.json>');
}
interface ReferenceRow {
  ids: number[];
  top_ids: number[][];
  top_scores: number[][];
}
interface Reference {
  gpu: string;
  torch: string;
  prompts: number[][];
  new_tokens: number;
  dtypes: Record<string, { seconds: number; rows: ReferenceRow[] }>;
}
const reference = JSON.parse(readFileSync(referencePath, 'utf8')) as Reference;
const BOUNDS: Record<string, number> = { fp16: 0.95, bf16: 0.95, fp32: 0.99 };
const NEAR_TIE = 1e-4;
const MAX_RESYNCS = Number(process.env.PARITY_MAX_RESYNCS ?? 32);
const NEW = reference.new_tokens;
const longestPrompt = Math.max(...reference.prompts.map((p) => p.length));

interface Divergence {
  prompt: number;
  step: number;
  hf_id: number;
  chorus_id: number;
  /** transformers' best score less its second best at this step. */
  hf_top2_gap: number;
  /** transformers' score of its id less its score of Chorus's (null: Chorus's id is not among its best 8). */
  hf_gap_to_chorus_id: number | null;
  near_tie: boolean;
}

/** Greedy ids of `prompt`, `count` of them, the end id held off throughout (as transformers' min_new_tokens). */
async function greedy(engine: NativeEngine, prompt: number[], count: number): Promise<number[]> {
  const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: count, min_length: count } }).pipe(toArray()));
  return events.map((e) => e.token);
}

/** One prompt against transformers' ids: equal steps, divergences, and the first divergence decoding freely. */
async function comparePrompt(engine: NativeEngine, p: number, want: ReferenceRow): Promise<{ equal: number; divergences: Divergence[]; freeRun: number; unchecked: number }> {
  const prompt = reference.prompts[p]!;
  const divergences: Divergence[] = [];
  let equal = 0;
  let freeRun = NEW;
  let start = 0;
  while (start < NEW) {
    if (divergences.length > MAX_RESYNCS) return { equal, divergences, freeRun, unchecked: NEW - start };
    const got = await greedy(engine, [...prompt, ...want.ids.slice(0, start)], NEW - start);
    let k = 0;
    while (k < got.length && got[k] === want.ids[start + k]) k++;
    equal += k;
    if (start === 0) freeRun = k;
    const step = start + k;
    if (step >= NEW) break;
    const tops = want.top_scores[step]!;
    const at = want.top_ids[step]!.indexOf(got[k]!);
    const gap = tops[0]! - tops[1]!;
    divergences.push({ prompt: p, step, hf_id: want.ids[step]!, chorus_id: got[k]!, hf_top2_gap: gap, hf_gap_to_chorus_id: at < 0 ? null : tops[0]! - tops[at]!, near_tie: gap <= NEAR_TIE });
    start = step + 1;
  }
  return { equal, divergences, freeRun, unchecked: 0 };
}

const runs: Array<Record<string, unknown>> = [];
const save = (): void => writeFileSync(outPath, JSON.stringify({ name, gpu: reference.gpu, torch: reference.torch, prompts: reference.prompts.length, prompt_length: longestPrompt, new_tokens: NEW, near_tie: NEAR_TIE, runs }, null, 2));
for (const [dtype, ref] of Object.entries(reference.dtypes)) {
  const dir = join(work, `${name}-${dtype}-parity`);
  const slotAttention = process.env.PARITY_SLOT_ATTENTION === undefined ? {} : { slotAttention: process.env.PARITY_SLOT_ATTENTION as NonNullable<BuildOptions['slotAttention']> };
  buildModel({ source: checkpoint, out: dir, dtype: dtype as NonNullable<BuildOptions['dtype']>, flavor: 'cuda', slotDecoder: true, ...slotAttention });
  const caches = (process.env[`PARITY_CACHES_${dtype.toUpperCase()}`] ?? (dtype === 'fp32' ? 'paged' : 'slots,paged')).split(',').filter((c) => c !== '');
  for (const cache of caches) {
    const log: string[] = [];
    const started = performance.now();
    const run: Record<string, unknown> = { dtype, cache, bound: BOUNDS[dtype] };
    try {
      const engine = await NativeEngine.open(dir, {
        provider: process.env.PARITY_PROVIDER === 'cpu' ? 'cpu' : 'cuda',
        maxBatchSize: reference.prompts.length,
        slotLength: longestPrompt + NEW + 16,
        pagedCache: cache === 'paged',
        cudaGraph: true,
        log: (line) => void log.push(line),
      });
      try {
        const results = await Promise.all(ref.rows.map((want, p) => comparePrompt(engine, p, want)));
        const equal = results.reduce((sum, r) => sum + r.equal, 0);
        const total = NEW * results.length;
        const divergences = results.flatMap((r) => r.divergences);
        Object.assign(run, {
          equal,
          total,
          share: equal / total,
          pass: equal / total >= BOUNDS[dtype]! && results.every((r) => r.unchecked === 0),
          divergences_near_tie: divergences.filter((d) => d.near_tie).length,
          free_run_first_divergence: results.map((r) => r.freeRun),
          unchecked: results.reduce((sum, r) => sum + r.unchecked, 0),
          divergences,
        });
      } finally {
        await engine.close();
      }
    } catch (error) {
      run.error = String(error).split('\n')[0];
    }
    Object.assign(run, { seconds: (performance.now() - started) / 1000, log, transformers_seconds: ref.seconds });
    runs.push(run);
    save();
    if (run.error !== undefined) {
      console.log(`${name} ${dtype} ${cache}: ${String(run.error)}`);
      continue;
    }
    const divergences = run.divergences as Divergence[];
    console.log(
      `${name} ${dtype} ${cache}: ${String(run.equal)}/${String(run.total)} equal (${(100 * (run.share as number)).toFixed(2)}%, bound ${100 * BOUNDS[dtype]!}%) ${run.pass === true ? 'PASS' : 'FAIL'}; ` +
        `${divergences.length} divergences, ${String(run.divergences_near_tie)} at near-ties (top-2 within ${NEAR_TIE}); free run to step ${(run.free_run_first_divergence as number[]).join(', ')}`,
    );
    for (const d of divergences) {
      console.log(`  prompt ${d.prompt} step ${d.step}: transformers ${d.hf_id}, Chorus ${d.chorus_id}; top-2 gap ${d.hf_top2_gap.toExponential(2)}, gap to Chorus's id ${d.hf_gap_to_chorus_id === null ? '> 8th' : d.hf_gap_to_chorus_id.toExponential(2)}`);
    }
    for (const line of log) console.log(`  ${line}`);
  }
}
save();
console.log(`wrote ${outPath}`);
