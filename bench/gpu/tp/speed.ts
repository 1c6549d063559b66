/**
 * Chorus's side of the tensor-parallel benchmark: one build (split over N GPUs, or whole) loaded as a
 * model definition runs it (a repository with `tensor_parallel: N`, the model store opening its engine),
 * then greedy decoding on the native engine: prompts of TP_PROMPT seeded ids, TP_NEW new tokens
 * (min_length too, so no request ends early), batch 1 and 64 (that many requests submitted together);
 * then TP_ID_ROWS rows of TP_IDS greedy ids kept for the TP=2 against TP=1 comparison. The load's log
 * lines (each GPU's share) are kept; a load that fails is recorded as `refused` with its message.
 * With TP_REFERENCE (another run's <name>.json, same prompts), the ids are also counted against that
 * run's: each row decodes from the reference's prefix, and where an id differs the step counts as
 * unequal and the row goes on from the reference's prefix through that step (a new request), so one
 * early near-tie does not decide the other steps (as bench/gpu/llama/parity.ts counts against
 * transformers); the first difference decoding freely is kept too, and at each differing step this
 * side's two best ids with the gap between their log-probabilities (how near a tie it was).
 * Usage: node --import tsx bench/gpu/tp/speed.ts <built-dir> <tensor-parallel> <name> <out-dir>
 *   -> <out-dir>/<name>.json
 * Knobs: TP_BATCHES=1,64  TP_PROMPT=128  TP_NEW=128  TP_IDS=512 (0: no ids run)  TP_ID_ROWS=4
 *   TP_DTYPE=fp16  TP_UTIL=<gpu_memory_utilization> (default: the engine's)  TP_MEASURE=0 (load, one
 *   short request, unload: the memory check)  TP_DEVICE=cuda  TP_PAGED=auto|true|false (paged_cache)
 *   TP_REFERENCE=<json>  TP_MAX_RESYNCS=32
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { ModelStore } from '../../../src/ensemble/index.ts';
import type { Engine } from '../../../src/generation/index.ts';
import { loadRepository } from '../../../src/repository/index.ts';
import { envCounts, seededRows } from '../speed/common.ts';

const [built, tpArg, name, out] = process.argv.slice(2);
if (built === undefined || tpArg === undefined || name === undefined || out === undefined) throw new Error('usage: speed.ts <built-dir> <tensor-parallel> <name> <out-dir>');
const tensorParallel = Number(tpArg);
const PROMPT = Number(process.env.TP_PROMPT ?? 128);
const NEW = Number(process.env.TP_NEW ?? 128);
const IDS = Number(process.env.TP_IDS ?? 512);
const ID_ROWS = Number(process.env.TP_ID_ROWS ?? 4);
const batches = envCounts('TP_BATCHES', '1,64');
const measureAll = process.env.TP_MEASURE !== '0';
const device = process.env.TP_DEVICE ?? 'cuda';
const vocab = (JSON.parse(readFileSync(join(built, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;

/** Each GPU's memory in use, in MiB, as nvidia-smi reports it. */
function gpuMemoryMiB(): number[] {
  if (device === 'cpu') return [];
  const text = execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  return text.trim().split('\n').map(Number);
}

const results: Record<string, unknown> = { name, built, tensor_parallel: tensorParallel, prompt: PROMPT, new_tokens: NEW, ids_new_tokens: IDS, gpu_memory_mib_before: gpuMemoryMiB(), load: [] as string[], rows: [] as unknown[] };
const loadLines = results.load as string[];
const rows = results.rows as Array<Record<string, unknown>>;
mkdirSync(out, { recursive: true });
const save = (): void => writeFileSync(join(out, `${name}.json`), `${JSON.stringify(results, null, 2)}\n`);

// The definition a user writes to serve the build split over N GPUs.
const repository = join(out, `repository-${name}`);
mkdirSync(join(repository, 'models'), { recursive: true });
const definition = [
  'engine: generate',
  `source: ${built}`,
  `device: ${device}`,
  `dtype: ${process.env.TP_DTYPE ?? 'fp16'}`,
  'native_engine: true',
  `tensor_parallel: ${tensorParallel}`,
  `max_batch_size: ${Math.max(...batches, ID_ROWS)}`,
  `max_sequence_length: ${PROMPT + Math.max(NEW, IDS)}`,
  ...(process.env.TP_UTIL === undefined ? [] : [`gpu_memory_utilization: ${process.env.TP_UTIL}`]),
  ...(process.env.TP_PAGED === undefined ? [] : [`paged_cache: ${process.env.TP_PAGED}`]),
];
writeFileSync(join(repository, 'models', 'm.yaml'), `${definition.join('\n')}\n`);
results.definition = definition;
const loaded = loadRepository(repository);
const errors = loaded.diagnostics.filter((d) => d.severity === 'error');
if (errors.length > 0) throw new Error(`the definition is refused: ${errors.map((d) => d.message).join('; ')}`);
const store = new ModelStore(loaded.repository, {
  log: (line) => {
    loadLines.push(line);
    console.log(`${name}: ${line}`);
  },
});

const loadStarted = performance.now();
let engine: Engine;
try {
  const model = await store.model('m');
  if (model.engine !== 'generate') throw new Error('not a generate model');
  engine = model.generator;
} catch (error) {
  results.refused = String((error as Error).message ?? error);
  results.load_seconds = (performance.now() - loadStarted) / 1000;
  console.log(`${name}: refused: ${String(results.refused)}`);
  save();
  await store.close();
  process.exit(0);
}
results.load_seconds = (performance.now() - loadStarted) / 1000;
results.gpu_memory_mib_loaded = gpuMemoryMiB();
console.log(`${name}: loaded in ${(results.load_seconds as number).toFixed(1)} s; GPU MiB ${(results.gpu_memory_mib_loaded as number[]).join(' / ')}`);
save();

/** Runs `prompts` together, greedy, `tokens` new tokens each: every row's ids. */
async function run(prompts: number[][], tokens: number): Promise<number[][]> {
  const params = { temperature: 0, request_output_len: tokens, min_length: tokens };
  return Promise.all(prompts.map(async (inputIds) => (await lastValueFrom(engine.submit({ inputIds, params, stream: true }).pipe(toArray()))).map((e) => e.token)));
}

/**
 * Each row's ids against the reference's, counted step by step from the reference's own prefix (see the
 * header): equal steps, the steps that differed, and where the free-running row first differed.
 */
async function agreement(prompts: number[][], reference: number[][], free: number[][]): Promise<Record<string, unknown>> {
  const maxResyncs = Number(process.env.TP_MAX_RESYNCS ?? 32);
  const rowsOut = await Promise.all(
    prompts.map(async (prompt, r) => {
      const want = reference[r]!.slice(0, IDS);
      const firstFree = free[r]!.findIndex((id, i) => id !== want[i]);
      // Steps before `position` agreed; the step at `position` differed.
      let position = firstFree < 0 ? want.length : firstFree;
      let equal = position;
      const differed: number[] = [];
      const margins: Array<{ step: number; ids: number[]; gap: number }> = [];
      while (position < want.length) {
        differed.push(position);
        // This side's two best ids at the differing step and the gap between their log-probabilities
        // (the logits' gap): how near a tie the step was.
        const top = await lastValueFrom(engine.submit({ inputIds: [...prompt, ...want.slice(0, position)], params: { temperature: 0, request_output_len: 1, top_logprobs: 2 }, stream: true }).pipe(toArray()));
        const best = top[0]?.topLogProbs ?? [];
        if (best.length === 2) margins.push({ step: position, ids: best.map((b) => b.token), gap: best[0]!.logProb - best[1]!.logProb });
        position += 1;
        if (position >= want.length || differed.length > maxResyncs) break;
        const [ids] = await run([[...prompt, ...want.slice(0, position)]], want.length - position);
        let k = 0;
        while (k < ids!.length && ids![k] === want[position + k]) k += 1;
        equal += k;
        position += k;
      }
      return { tokens: want.length, equal, differed, margins, unchecked: want.length - Math.min(want.length, position), free_first_difference: firstFree < 0 ? null : firstFree };
    }),
  );
  const tokens = rowsOut.reduce((sum, row) => sum + row.tokens, 0);
  const equal = rowsOut.reduce((sum, row) => sum + row.equal, 0);
  return { percent_equal: (100 * equal) / Math.max(1, tokens), tokens, equal, rows: rowsOut };
}

try {
  if (!measureAll) {
    const [ids] = await run(seededRows(1, PROMPT, vocab), 16);
    results.served = { new_tokens: ids!.length, gpu_memory_mib: gpuMemoryMiB() };
    console.log(`${name}: served a request (${ids!.length} tokens)`);
  } else {
    for (const batch of batches) {
      const prompts = seededRows(batch, PROMPT, vocab);
      // Warm-up: the batch's steps captured as CUDA graphs.
      await run(prompts, NEW);
      const before = engine.stats().decodeSteps;
      const started = performance.now();
      const ids = await run(prompts, NEW);
      const seconds = (performance.now() - started) / 1000;
      const tokens = ids.reduce((sum, row) => sum + row.length, 0);
      const row = { setting: `batch ${batch}`, batch, tokens, tokens_per_s: tokens / seconds, ms_per_step: (seconds * 1000) / Math.max(1, engine.stats().decodeSteps - before), gpu_memory_mib: gpuMemoryMiB() };
      rows.push(row);
      console.log(`${name}: ${JSON.stringify(row)}`);
      save();
    }
    if (IDS > 0) {
      const prompts = seededRows(ID_ROWS, PROMPT, vocab);
      results.ids = await run(prompts, IDS);
      console.log(`${name}: ${ID_ROWS} rows of ${IDS} greedy ids kept`);
      if (process.env.TP_REFERENCE !== undefined) {
        const reference = JSON.parse(readFileSync(process.env.TP_REFERENCE, 'utf8')) as { name: string; ids?: number[][] };
        if (reference.ids === undefined) throw new Error(`${process.env.TP_REFERENCE} has no ids`);
        results.agreement = { against: reference.name, ...(await agreement(prompts, reference.ids, results.ids as number[][])) };
        console.log(`${name}: ids against ${reference.name}: ${JSON.stringify(results.agreement)}`);
      }
    }
  }
} finally {
  save();
  // A close that does not end (the split model's communicators waiting on its ranks) is recorded, and
  // the run ends anyway: its figures are written.
  const CLOSE_SECONDS = 60;
  const closed = await Promise.race([store.close().then(() => true), new Promise<false>((resolve) => setTimeout(() => resolve(false), CLOSE_SECONDS * 1000).unref())]);
  if (!closed) {
    results.close_hung = `the model did not close within ${CLOSE_SECONDS} s`;
    console.log(`${name}: ${String(results.close_hung)}`);
    save();
    process.exit(3);
  }
}
process.exit(0);
