/**
 * Splits the measured window of a kernel trace (kernel-trace.cc's CSV: the busy stretch after the last
 * idle gap of 300 ms or more) into kernel time inside CUDA graphs, kernel time outside them, memory
 * copies and idle gaps (the GPU waiting on the host: launches, synchronizations, JavaScript), per
 * decode step; and lists the kernels by their time.
 * Usage: node --import tsx bench/gpu/profile/summary.ts <trace.csv> <steps.json> <out.json>
 */
import { readFileSync, writeFileSync } from 'node:fs';

const [tracePath, stepsPath, outPath] = process.argv.slice(2);
if (tracePath === undefined || stepsPath === undefined || outPath === undefined) throw new Error('usage: summary.ts <trace.csv> <steps.json> <out.json>');
const run = JSON.parse(readFileSync(stepsPath, 'utf8')) as { model: string; batch: number; flags: string[]; steps: number; msPerStep: number };
const names = new Map<number, string>();
type Span = { start: number; end: number; name: number; graph: boolean; copy: boolean };
const spans: Span[] = [];
for (const line of readFileSync(tracePath, 'utf8').split('\n')) {
  const [kind, a, b, c, d] = line.split(',');
  if (kind === 'name') names.set(Number(a), line.split(',').slice(2).join(','));
  else if (kind === 'k') spans.push({ start: Number(a), end: Number(b), name: Number(c), graph: Number(d) !== 0, copy: false });
  else if (kind === 'm') spans.push({ start: Number(a), end: Number(b), name: -1, graph: false, copy: true });
}
spans.sort((x, y) => x.start - y.start);
const GAP_NS = 300e6;
let from = 0;
for (let i = 1; i < spans.length; i++) if (spans[i]!.start - spans[i - 1]!.end >= GAP_NS) from = i;
// The measured window ends at the next long gap (the engine closing after 300 ms idle).
let to = spans.length;
for (let i = from + 1; i < spans.length; i++) {
  if (spans[i]!.start - spans[i - 1]!.end >= GAP_NS) {
    to = i;
    break;
  }
}
const window = spans.slice(from, to);
if (window.length === 0) throw new Error(`${tracePath} has no records`);
// Busy time: the union of the intervals, credited to the first kind that covers each stretch.
function busy(spans: Span[]): { ns: number; graph: number; other: number; copy: number; idle: number } {
  if (spans.length === 0) return { ns: 0, graph: 0, other: 0, copy: 0, idle: 0 };
  const begin = spans[0]!.start;
  const finish = spans.reduce((most, s) => Math.max(most, s.end), -Infinity);
  const sums = { graph: 0, other: 0, copy: 0 };
  let reach = begin;
  for (const s of spans) {
    const start = Math.max(s.start, reach);
    if (s.end > start) {
      sums[s.copy ? 'copy' : s.graph ? 'graph' : 'other'] += s.end - start;
      reach = s.end;
    }
  }
  const ns = finish - begin;
  return { ns, ...sums, idle: ns - sums.graph - sums.other - sums.copy };
}
const perStep = (ns: number): number => ns / 1e6 / run.steps;
/** The kernels of `spans` by their total time, `per` (ns to a reported figure) applied to each. */
function byKernel(spans: Span[], per: (ns: number) => number, count: (n: number) => number) {
  const byName = new Map<string, { ns: number; count: number; graph: number }>();
  for (const s of spans) {
    if (s.copy) continue;
    const name = names.get(s.name) ?? String(s.name);
    const entry = byName.get(name) ?? { ns: 0, count: 0, graph: 0 };
    entry.ns += s.end - s.start;
    entry.count++;
    if (s.graph) entry.graph++;
    byName.set(name, entry);
  }
  return [...byName.entries()]
    .sort((x, y) => y[1].ns - x[1].ns)
    .map(([name, e]) => ({ name, ms: per(e.ns), calls: count(e.count), meanUs: e.ns / e.count / 1e3, inGraph: e.graph / e.count }));
}
const all = busy(window);
const kernels = byKernel(window, perStep, (n) => n / run.steps).map(({ ms, calls, ...k }) => ({ ...k, msPerStep: ms, perStep: calls }));
const kernelCount = window.filter((s) => !s.copy).length;
// The first token's stretch (prefill or encoder, up to the first kernel of a captured step graph) and
// the steps after it, each split the same way.
const firstGraph = window.findIndex((s) => s.graph);
const phases =
  firstGraph <= 0
    ? undefined
    : Object.fromEntries(
        (
          [
            ['first', window.slice(0, firstGraph)],
            ['steps', window.slice(firstGraph)],
          ] as const
        ).map(([phase, spans]) => {
          const b = busy(spans);
          const ms = (ns: number): number => ns / 1e6;
          return [phase, { ms: ms(b.ns), graphKernels: ms(b.graph), otherKernels: ms(b.other), copies: ms(b.copy), idle: ms(b.idle), kernels: byKernel(spans, ms, (n) => n).slice(0, 15) }];
        }),
      );
// One decode step as it ran, from the middle of the window: each kernel in order, its time and the gap
// before it (where the GPU waited between kernels).
const perStepCount = Math.max(1, Math.round(kernelCount / run.steps));
const kernelSpans = window.filter((s) => !s.copy);
const middle = Math.max(1, Math.floor(kernelSpans.length / 2));
const sequence = kernelSpans.slice(middle, middle + perStepCount).map((s, i, all) => ({
  name: (names.get(s.name) ?? String(s.name)).slice(0, 120),
  us: (s.end - s.start) / 1e3,
  gapUs: ((i === 0 ? s.start - kernelSpans[middle - 1]!.end : s.start - all[i - 1]!.end) / 1e3),
}));
const summary = {
  ...run,
  windowMs: all.ns / 1e6,
  perStepMs: { window: perStep(all.ns), graphKernels: perStep(all.graph), otherKernels: perStep(all.other), copies: perStep(all.copy), idle: perStep(all.idle) },
  kernelsPerStep: kernelCount / run.steps,
  kernels: kernels.slice(0, 25),
  ...(phases === undefined ? {} : { phases }),
  sequence,
};
writeFileSync(outPath, JSON.stringify(summary, null, 2));
const f = (ms: number): string => ms.toFixed(3);
console.log(`\n${run.model} batch ${run.batch} ${run.flags.join(' ')}: ${run.steps} steps, wall ${f(run.msPerStep)} ms/step; GPU window ${f(summary.perStepMs.window)} ms/step =`);
console.log(`  kernels in graphs ${f(summary.perStepMs.graphKernels)} + other kernels ${f(summary.perStepMs.otherKernels)} + copies ${f(summary.perStepMs.copies)} + idle ${f(summary.perStepMs.idle)}; ${summary.kernelsPerStep.toFixed(1)} kernels per step`);
console.log('  | kernel | ms/step | per step | mean us | in graph |');
for (const k of kernels.slice(0, 15)) console.log(`  | ${k.name.slice(0, 90)} | ${f(k.msPerStep)} | ${k.perStep.toFixed(1)} | ${k.meanUs.toFixed(1)} | ${(k.inGraph * 100).toFixed(0)}% |`);
const gaps = sequence.reduce((sum, k) => sum + Math.max(0, k.gapUs), 0);
console.log(`  one step in order: ${sequence.length} kernels, ${(sequence.reduce((sum, k) => sum + k.us, 0) / 1e3).toFixed(3)} ms of kernels, ${(gaps / 1e3).toFixed(3)} ms of gaps between them`);
if (phases !== undefined) {
  for (const [phase, p] of Object.entries(phases)) {
    console.log(`  ${phase}: ${f(p.ms)} ms = kernels in graphs ${f(p.graphKernels)} + other kernels ${f(p.otherKernels)} + copies ${f(p.copies)} + idle ${f(p.idle)}`);
    for (const k of p.kernels.slice(0, 10)) console.log(`    | ${k.name.slice(0, 80)} | ${f(k.ms)} ms | ${k.calls} calls | ${k.meanUs.toFixed(1)} us |`);
  }
}
