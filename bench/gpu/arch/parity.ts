/**
 * The newer decoder families against transformers' goldens, on CUDA: each fixture of test/fixtures/arch
 * (config.json, model.safetensors and golden.json, made by transformers in float32 on the CPU with eager
 * attention) built fp32 and fp16 (`chorus build --flavor cuda --slot-decoder`), then
 *   - the runtime's logits (each prompt's prefill, last row, and its 4 teacher-forced steps) against the golden's;
 *   - 64 greedy steps from the 8 prompts, submitted together, through the native engine (contiguous slots
 *     with CUDA graphs, and the paged cache) and the TypeScript engine (OrtEngine), against the golden's;
 *   - the golden's beam searches (4 beams, 4 returned, 16 tokens) through both engines: sequences and scores.
 * fp32 passes when every greedy and beam token equals the golden's and the scores are within 1e-4; fp16
 * when at least 95% of greedy tokens (position by position) equal transformers' own fp16 ids on CUDA
 * (HF_GREEDY: bench/gpu/arch/hf16.py's output; without it, the fp32 golden's). A family the build refuses
 * is recorded with its error. Prints a table; writes <out-dir>/arch-parity.json.
 * Usage: node --import tsx bench/gpu/arch/parity.ts <work-dir> <out-dir> [family-regexp] [cuda|cpu]
 *   (ARCH_FIXTURES=<dir> reads the fixtures from another folder.)
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NativeEngine, OrtEngine, type Engine } from '../../../src/generation/index.ts';
import { buildModel } from '../../../src/modelbuild/index.ts';
import { DecoderSession } from '../../../src/runtime/index.ts';
import { engineBeams, engineGreedy, type ArchGolden } from '../../../test/helpers/arch-golden.ts';
import { agreement, beamAgreement, type Agreement, type BeamAgreement } from './compare.ts';

const [work = '/tmp/arch-parity', out = join(work, 'out'), filter = '', deviceArg = 'cuda'] = process.argv.slice(2);
if (deviceArg !== 'cuda' && deviceArg !== 'cpu') throw new Error(`the device is cuda or cpu, got '${deviceArg}'`);
const device: 'cuda' | 'cpu' = deviceArg;
// fp32 means fp32 on the GPU too: no TF32 matrix products anywhere in the process (fp16 is unaffected).
if (device === 'cuda') process.env.NVIDIA_TF32_OVERRIDE ??= '0';
const fixtures = process.env.ARCH_FIXTURES ?? join(import.meta.dirname, '..', '..', '..', 'test', 'fixtures', 'arch');
const families = readdirSync(fixtures)
  .filter((name) => existsSync(join(fixtures, name, 'golden.json')) && new RegExp(filter).test(name))
  .sort();
/** transformers' own greedy ids in fp16 and bf16 on CUDA, by family (bench/gpu/arch/hf16.py), when given. */
const hfGreedy = process.env.HF_GREEDY === undefined ? undefined : (JSON.parse(readFileSync(process.env.HF_GREEDY, 'utf8')) as Record<string, { fp16?: number[][] }>);
const BOUNDS = { fp32: { logits: 1e-4, greedy: 1 }, fp16: { logits: 5e-2, greedy: 0.95 } } as const;

/** The largest |logit - golden| over every prompt's prefill and forced steps, through the runtime's session. */
async function logitsDiff(built: string, golden: ArchGolden): Promise<number> {
  const session = await DecoderSession.open(built, { executionProviders: [device] });
  try {
    const V = session.vocabSize;
    let worst = 0;
    let row = 0;
    const compare = (logits: Float32Array, at: number): void => {
      const want = golden.logits[row++]!;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Number.isNaN(logits[at + i]!) ? Infinity : Math.abs(logits[at + i]! - want[i]!));
    };
    for (const [p, prompt] of golden.prompts.entries()) {
      let step = await session.run({ inputIds: [prompt] });
      compare(step.logits, (step.dims[1] - 1) * V);
      for (const token of golden.forced[p]!) {
        step = await session.run({ inputIds: [[token]], cache: step.cache });
        compare(step.logits, 0);
      }
    }
    return worst;
  } finally {
    await session.close();
  }
}

/** One family in one dtype: the build, then each check; errors recorded where they happen. */
async function check(family: string, dtype: 'fp32' | 'fp16'): Promise<Record<string, unknown>> {
  const golden = JSON.parse(readFileSync(join(fixtures, family, 'golden.json'), 'utf8')) as ArchGolden;
  const config = JSON.parse(readFileSync(join(fixtures, family, 'config.json'), 'utf8')) as { model_type?: string };
  const row: Record<string, unknown> = { family, model_type: config.model_type, dtype, device, min_top2_gap: golden.min_top2_gap };
  const started = performance.now();
  const built = join(work, `${family}-${dtype}`);
  try {
    buildModel({ source: join(fixtures, family), out: built, dtype, flavor: 'cuda', slotDecoder: true });
  } catch (error) {
    return { ...row, error: `build: ${String(error).split('\n')[0]}` };
  }
  const attempt = async <T>(name: string, task: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await task();
    } catch (error) {
      row[`${name}_error`] = String(error).split('\n')[0];
      return undefined;
    }
  };
  row.logits_max_abs_diff = await attempt('logits', () => logitsDiff(built, golden));
  const tf32 = dtype === 'fp32' && device === 'cuda' ? { cudaOptions: { use_tf32: 0 } } : {};
  const engines: Array<[string, () => Promise<Engine>]> = [
    ['native', () => NativeEngine.open(built, { provider: device, maxBatchSize: 8, cudaGraph: device === 'cuda', slotLength: 128, pagedCache: false, ...tf32 })],
    ['native_paged', () => NativeEngine.open(built, { provider: device, maxBatchSize: 8, cudaGraph: device === 'cuda', slotLength: 128, pagedCache: true, blockSize: 16, ...tf32 })],
    ['ts', () => OrtEngine.open(built, { executionProviders: [device], maxBatchSize: 8, greedySearch: false })],
  ];
  for (const [name, open] of engines) {
    const engine = await attempt(name, open);
    if (engine === undefined) continue;
    try {
      const ids = await attempt(name, () => engineGreedy(engine, golden));
      const reference = dtype === 'fp16' ? (hfGreedy?.[family]?.fp16 ?? golden.greedy) : golden.greedy;
      if (ids !== undefined) row[`${name}_greedy`] = agreement(ids, reference);
      if (ids !== undefined && reference !== golden.greedy) row[`${name}_greedy_vs_fp32`] = agreement(ids, golden.greedy);
      // Beam searches on the paged cache take the same beam code as the contiguous one: once is enough.
      if (name !== 'native_paged') {
        const found = await attempt(`${name}_beam`, () => Promise.all(golden.beam.map((c) => engineBeams(engine, c))));
        if (found !== undefined) row[`${name}_beam`] = beamAgreement(found, golden.beam);
      }
    } finally {
      await engine.close();
    }
  }
  const bound = BOUNDS[dtype];
  const greedyRatios = ['native', 'native_paged', 'ts'].map((name) => (row[`${name}_greedy`] as { ratio: number } | undefined)?.ratio ?? 0);
  const beamsEqual = ['native', 'ts'].every((name) => (row[`${name}_beam`] as { equal: boolean } | undefined)?.equal === true);
  row.ok = greedyRatios.every((r) => r >= bound.greedy) && (dtype === 'fp16' || beamsEqual);
  row.logits_bound = bound.logits;
  row.seconds = (performance.now() - started) / 1000;
  return row;
}

const rows: Array<Record<string, unknown>> = [];
for (const family of families) {
  for (const dtype of ['fp32', 'fp16'] as const) {
    const row = await check(family, dtype);
    rows.push(row);
    writeFileSync(join(out, 'arch-parity.json'), JSON.stringify({ device, fixtures, rows }, null, 2));
    process.stdout.write(`${JSON.stringify(row)}\n`);
  }
}
const cell = (v: unknown): string => (v === undefined ? '-' : `${(v as Agreement).same}/${(v as Agreement).total}`);
const beamCell = (v: unknown): string => {
  if (v === undefined) return '-';
  const b = v as BeamAgreement;
  return b.equal ? `equal ${b.worstScoreDiff.toExponential(1)}` : b.sequencesEqual ? `scores ${b.worstScoreDiff.toExponential(1)}` : 'differs';
};
process.stdout.write(`\n${'family'.padEnd(8)} ${'dtype'.padEnd(5)} ${'logits |diff|'.padStart(13)} ${'native'.padStart(8)} ${'paged'.padStart(8)} ${'ts'.padStart(8)} ${'native beam'.padStart(14)} ${'ts beam'.padStart(14)}  ok\n`);
for (const r of rows) {
  if (r.error !== undefined) {
    process.stdout.write(`${String(r.family).padEnd(8)} ${String(r.dtype).padEnd(5)} ${String(r.error).slice(0, 110)}\n`);
    continue;
  }
  const diff = typeof r.logits_max_abs_diff === 'number' ? r.logits_max_abs_diff.toExponential(2) : 'error';
  process.stdout.write(
    `${String(r.family).padEnd(8)} ${String(r.dtype).padEnd(5)} ${diff.padStart(13)} ${cell(r.native_greedy).padStart(8)} ${cell(r.native_paged_greedy).padStart(8)} ${cell(r.ts_greedy).padStart(8)} ${beamCell(r.native_beam).padStart(14)} ${beamCell(r.ts_beam).padStart(14)}  ${r.ok ? 'yes' : 'NO'}\n`,
  );
  for (const key of Object.keys(r).filter((k) => k.endsWith('_error'))) process.stdout.write(`  ${key}: ${String(r[key]).slice(0, 200)}\n`);
}
