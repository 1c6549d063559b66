/**
 * Mistral's and Gemma 2's golden fixtures (test/fixtures/arch/<family>: transformers, float32, eager
 * attention, windows of 8) on CUDA: each built in fp32, fp16 and bf16 (cuda flavor with the slot and
 * paged decoders) and run by the native engine with its slot cache and its paged cache, and (fp32,
 * fp16) by the TypeScript engine on the cuda flavor's decoder (its window in the attention bias). Counts
 * the greedy ids (64 per prompt) and the beam searches' ids that equal transformers' float32 ones; beam
 * scores are compared within 1e-4 in fp32. With HF_GREEDY (hf.py's output: transformers' own fp16 and
 * bf16 greedy ids on CUDA), 16-bit builds are also counted against transformers in their precision.
 * The bar: fp32 equal, fp16 >= 95%.
 *   source /root/gpu-env/env.sh && python3 bench/gpu/window/hf.py /tmp/window-hf.json &&
 *   HF_GREEDY=/tmp/window-hf.json node --import tsx bench/gpu/window/parity.ts [family ...]
 * Prints a table; writes $OUT/window-parity.json (or bench/results/window-parity-<date>.json).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NativeEngine, OrtEngine, type Engine } from '../../../src/generation/index.ts';
import { buildModel, type BuildDtype } from '../../../src/modelbuild/index.ts';
import { archFixture, engineBeams, engineGreedy, readArchGolden, type ArchGolden } from '../../../test/helpers/arch-golden.ts';

const families = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['mistral', 'gemma2'];
const work = process.env.PARITY_DIR ?? '/tmp/window-parity';
const DTYPES: BuildDtype[] = ['fp32', 'fp16', 'bf16'];
/** transformers' greedy ids in fp16 and bf16, by family, when hf.py has run. */
const hfGreedy = process.env.HF_GREEDY === undefined ? undefined : (JSON.parse(readFileSync(process.env.HF_GREEDY, 'utf8')) as Record<string, Partial<Record<BuildDtype, number[][]>>>);

interface Row {
  family: string;
  dtype: BuildDtype;
  engine: string;
  greedy: string;
  /** Against transformers in the build's own precision (16-bit builds, with HF_GREEDY). */
  greedySamePrecision?: string;
  beam: string;
  worstScoreDiff: number | null;
  error?: string;
}

/** Ids equal at the same place, over all of `want`'s. */
function agreement(got: number[][], want: number[][]): [number, number] {
  return [want.reduce((n, row, i) => n + row.filter((t, j) => got[i]?.[j] === t).length, 0), want.reduce((n, row) => n + row.length, 0)];
}

async function measure(engine: Engine, golden: ArchGolden, hf: number[][] | undefined): Promise<Omit<Row, 'family' | 'dtype' | 'engine'>> {
  const greedy = await engineGreedy(engine, golden);
  const own = hf === undefined ? {} : { greedySamePrecision: agreement(greedy, hf).join('/') };
  const beams = await Promise.all(golden.beam.map((c) => engineBeams(engine, c)));
  const [g, gAll] = agreement(greedy, golden.greedy);
  const beamIds = golden.beam.map((c, i) => agreement(beams[i]!.sequences, c.sequences));
  const worst = golden.beam.reduce((w, c, i) => Math.max(w, ...c.scores.map((s, j) => Math.abs((beams[i]!.scores[j] ?? Infinity) - s))), 0);
  return { ...own, greedy: `${g}/${gAll}`, beam: `${beamIds.reduce((n, [a]) => n + a, 0)}/${beamIds.reduce((n, [, b]) => n + b, 0)}`, worstScoreDiff: worst };
}

const rows: Row[] = [];
for (const family of families) {
  const golden = readArchGolden(family);
  if (golden === undefined) throw new Error(`no fixture at ${archFixture(family)}`);
  for (const dtype of DTYPES) {
    const dir = join(work, `${family}-${dtype}`);
    buildModel({ source: archFixture(family), out: dir, dtype, flavor: 'cuda', slotDecoder: true });
    const engines: Array<[string, () => Promise<Engine>]> = [
      ['native, slot cache', () => NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 8, slotLength: 256 })],
      ['native, paged cache', () => NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 8, pagedCache: true })],
      ...(dtype === 'bf16' ? [] : ([['TypeScript, cuda flavor', () => OrtEngine.open(dir, { executionProviders: ['cuda'], maxBatchSize: 8, greedySearch: false })]] as Array<[string, () => Promise<Engine>]>)),
    ];
    for (const [name, open] of engines) {
      const row: Row = { family, dtype, engine: name, greedy: '-', beam: '-', worstScoreDiff: null };
      let engine: Engine | undefined;
      try {
        engine = await open();
        Object.assign(row, await measure(engine, golden, dtype === 'fp32' ? undefined : hfGreedy?.[family]?.[dtype]));
      } catch (error) {
        row.error = String(error).slice(0, 300);
      } finally {
        await engine?.close();
      }
      rows.push(row);
      console.log([family, dtype, name.padEnd(24), `greedy ${row.greedy}`, `same precision ${row.greedySamePrecision ?? '-'}`, `beam ${row.beam}`, `worst score diff ${row.worstScoreDiff?.toExponential(2) ?? '-'}`, row.error ?? ''].join('  '));
    }
  }
}
const outDir = process.env.OUT ?? join(process.cwd(), 'bench/results');
mkdirSync(outDir, { recursive: true });
const file = join(outDir, process.env.OUT === undefined ? `window-parity-${new Date().toISOString().slice(0, 10)}.json` : 'window-parity.json');
writeFileSync(file, `${JSON.stringify({ families, rows }, null, 2)}\n`);
console.log(`wrote ${file}`);
