/**
 * Where a native engine step's time goes on the CPU: a batch-1 step and a 16-row step of greedy decoding,
 * split by the addon's counters into ONNX Runtime's session runs, the addon's own work around them
 * (argmax, copies) and what is outside the addon (JavaScript: scheduling, streams), with ONNX Runtime's
 * intra-op threads spinning or not. Median of three runs after a warm-up. With CHORUS_ORT_PROFILE=<prefix>
 * set, ONNX Runtime profiles every run too, and each model's ONNX Runtime time is split by operator.
 * Usage: node --import tsx bench/cpu/native-step-profile.ts
 *   BENCH_MODELS=stories,gpt2,qwen2 (default stories,gpt2), BENCH_STEPS=64, BENCH_WEIGHTS=int8 (default: fp32),
 *   BENCH_OUT=<json> (default bench/results/cpu-native-step-profile-<date>.json)
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';

const PROMPT = 16;
const ROOT = join(import.meta.dirname, '../..');
const work = join(tmpdir(), 'chorus-bench-cpu-native');
const steps = Number(process.env.BENCH_STEPS ?? 64);
if (!Number.isInteger(steps) || steps < 1) throw new Error(`BENCH_STEPS must be a positive integer, got "${process.env.BENCH_STEPS}"`);

interface Row {
  model: string;
  rows: number;
  spinning: boolean;
  tokensPerS: number;
  /** Milliseconds per step: all of it, in ONNX Runtime's runs, in the addon besides, outside the addon. */
  stepMs: number;
  ortMs: number;
  addonMs: number;
  outsideMs: number;
}

const sources: Record<string, () => { name: string; source: string }> = {
  stories: () => ({ name: 'stories260K', source: join(ROOT, '../shared/models/stories260K/stories260K.bin') }),
  gpt2: () => {
    makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'gpt2-124m-ckpt') });
    return { name: 'GPT-2 124M (random weights)', source: join(work, 'gpt2-124m-ckpt') };
  },
  qwen2: () => {
    makeCheckpoint({ arch: 'qwen2', size: 'real', seed: 1, out: join(work, 'qwen2-0.5b-ckpt') });
    return { name: 'Qwen2-0.5B shape (random weights)', source: join(work, 'qwen2-0.5b-ckpt') };
  },
};
const wanted = (process.env.BENCH_MODELS ?? 'stories,gpt2').split(',');
const int8 = process.env.BENCH_WEIGHTS === 'int8';
if (!int8 && (process.env.BENCH_WEIGHTS ?? 'fp32') !== 'fp32') throw new Error(`BENCH_WEIGHTS takes fp32 or int8, got ${process.env.BENCH_WEIGHTS}`);
for (const m of wanted) if (sources[m] === undefined) throw new Error(`BENCH_MODELS takes ${Object.keys(sources).join(', ')}, got ${m}`);
mkdirSync(work, { recursive: true });

const results: Row[] = [];
/** Per model: ONNX Runtime's node time by operator (microseconds), from its profiles, when CHORUS_ORT_PROFILE is set. */
const operators: Record<string, Record<string, number>> = {};
const profilePrefix = process.env.CHORUS_ORT_PROFILE;

/** Sums the node events of the profiles ONNX Runtime wrote since the last call, by operator, and removes them. */
function takeProfiles(): Record<string, number> {
  const byOp: Record<string, number> = {};
  if (profilePrefix === undefined || profilePrefix === '') return byOp;
  const dir = dirname(profilePrefix);
  for (const file of readdirSync(dir).filter((f) => f.startsWith(basename(profilePrefix)) && f.endsWith('.json'))) {
    const events = JSON.parse(readFileSync(join(dir, file), 'utf8')) as Array<{ cat?: string; dur?: number; args?: { op_name?: string } }>;
    for (const e of events) if (e.cat === 'Node' && e.args?.op_name !== undefined) byOp[e.args.op_name] = (byOp[e.args.op_name] ?? 0) + (e.dur ?? 0);
    rmSync(join(dir, file));
  }
  return byOp;
}
for (const key of wanted) {
  const { name: model, source } = sources[key]!();
  const name = int8 ? `${model}, int8 weights` : model;
  const dir = join(work, `${name.replace(/\W+/g, '-')}-slots`);
  buildModel({ source, out: dir, flavor: 'cuda', slotDecoder: true, ...(int8 ? { weights: 'int8' as const } : {}) });
  for (const spinning of [false, true]) {
    const engine = await NativeEngine.open(dir, { maxBatchSize: 16, slotLength: PROMPT + steps + 8, intraOpSpinning: spinning });
    for (const rows of [1, 16]) {
      const prompts = Array.from({ length: rows }, (_, r) => Array.from({ length: PROMPT }, (_, i) => 3 + ((r * 31 + i * 7) % 400)));
      const params = { temperature: 0, request_output_len: steps, min_length: steps };
      const run = () => Promise.all(prompts.map((p) => lastValueFrom(engine.submit({ inputIds: p, params }).pipe(toArray()))));
      await run();
      const measured: Row[] = [];
      for (let i = 0; i < 3; i++) {
        const before = engine.profile();
        const started = performance.now();
        await run();
        const wall = performance.now() - started;
        const after = engine.profile();
        const ort = after.sessionMs - before.sessionMs;
        const addon = after.nativeMs - before.nativeMs;
        measured.push({ model: name, rows, spinning, tokensPerS: (rows * steps * 1000) / wall, stepMs: wall / steps, ortMs: ort / steps, addonMs: (addon - ort) / steps, outsideMs: (wall - addon) / steps });
      }
      results.push(measured.sort((a, b) => a.stepMs - b.stepMs)[1]!);
    }
    await engine.close();
    if (!spinning) operators[name] = takeProfiles();
    else takeProfiles();
  }
}

const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'rows', 'threads', 'tok/s', 'ms a step', 'ORT runs', 'addon besides', 'outside the addon']));
console.log(line(['---', '---:', '---', '---:', '---:', '---:', '---:', '---:']));
for (const r of results) {
  console.log(line([r.model, String(r.rows), r.spinning ? 'spinning' : 'not spinning', r.tokensPerS.toFixed(0), r.stepMs.toFixed(3), r.ortMs.toFixed(3), r.addonMs.toFixed(3), r.outsideMs.toFixed(3)]));
}
for (const [model, byOp] of Object.entries(operators)) {
  const total = Object.values(byOp).reduce((a, b) => a + b, 0);
  if (total === 0) continue;
  const shares = Object.entries(byOp).sort((a, b) => b[1] - a[1]).map(([op, us]) => `${op} ${((100 * us) / total).toFixed(1)}%`);
  console.log(`${model}: ONNX Runtime's node time by operator (threads not spinning, all runs): ${shares.join(', ')}`);
}
const out = process.env.BENCH_OUT ?? join(ROOT, 'bench/results', `cpu-native-step-profile-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(out, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, promptTokens: PROMPT, steps, rows: results, ...(Object.keys(operators).length > 0 ? { operatorMicroseconds: operators } : {}) }, null, 2)}\n`);
console.log(`wrote ${out}`);
