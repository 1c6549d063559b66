/**
 * The table of one shape's quantized runs beside fp16: tokens/s per cache and batch for fp16, int8 and
 * int4 (speed.ts's results files in <work-dir>), each quantized figure's ratio to fp16, the build's
 * weight bytes, and the paged cache's load lines (the tokens it holds grow as the weights shrink).
 * Usage: node --import tsx bench/gpu/quant/summary.ts <work-dir> <shape> <out.json>
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [work, shape, out] = process.argv.slice(2);
if (work === undefined || shape === undefined || out === undefined) throw new Error('usage: summary.ts <work-dir> <shape> <out.json>');

interface Run {
  weights: string;
  build?: { seconds: number; weight_bytes?: number };
  load?: string[];
  rows?: Array<{ setting?: string; tokens_per_s?: number; ms_per_step?: number; gpu_memory_mib?: number; error?: string; cache?: string }>;
}
const variants = ['fp16', 'fp16-int8', 'fp16-int4'];
const runs = new Map<string, Run | undefined>();
for (const v of variants) {
  const file = join(work, `${shape}-${v}.json`);
  runs.set(v, existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Run) : undefined);
}
const base = runs.get('fp16');
const rate = (run: Run | undefined, setting: string): number | undefined => run?.rows?.find((r) => r.setting === setting)?.tokens_per_s;
const settings = [...new Set(variants.flatMap((v) => (runs.get(v)?.rows ?? []).map((r) => r.setting).filter((s): s is string => s !== undefined)))];
const table = settings.map((setting) => {
  const row: Record<string, unknown> = { setting };
  for (const v of variants) {
    const value = rate(runs.get(v), setting);
    row[`${v}_tokens_per_s`] = value;
    const fp16 = rate(base, setting);
    if (v !== 'fp16' && value !== undefined && fp16 !== undefined) row[`${v}_vs_fp16`] = value / fp16;
  }
  return row;
});
console.log(`${shape}: tokens/s (ratio to fp16)`);
console.log(`${'setting'.padEnd(18)} ${'fp16'.padStart(10)} ${'int8'.padStart(18)} ${'int4'.padStart(18)}`);
const cell = (row: Record<string, unknown>, v: string): string => {
  const value = row[`${v}_tokens_per_s`] as number | undefined;
  if (value === undefined) return 'failed';
  const ratio = row[`${v}_vs_fp16`] as number | undefined;
  return `${value.toFixed(1)}${ratio === undefined ? '' : ` (${ratio.toFixed(2)}x)`}`;
};
for (const row of table) console.log(`${String(row.setting).padEnd(18)} ${cell(row, 'fp16').padStart(10)} ${cell(row, 'fp16-int8').padStart(18)} ${cell(row, 'fp16-int4').padStart(18)}`);
const weights = Object.fromEntries(variants.map((v) => [v, { weight_bytes: runs.get(v)?.build?.weight_bytes, build_seconds: runs.get(v)?.build?.seconds, load: runs.get(v)?.load, errors: runs.get(v)?.rows?.filter((r) => r.error !== undefined) }]));
for (const v of variants) console.log(`${v}: ${((runs.get(v)?.build?.weight_bytes ?? 0) / 2 ** 30).toFixed(2)} GiB of weights; ${(runs.get(v)?.load ?? []).filter((l) => l.startsWith('paged')).join(' | ')}`);
writeFileSync(out, `${JSON.stringify({ shape, table, variants: weights }, null, 2)}\n`);
console.log(`wrote ${out}`);
