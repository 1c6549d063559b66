/**
 * How close int8 and int4 builds of stories260K (the one real model here) stay to its fp32 build, on
 * the CPU. Greedy: from BOS alone and from BOS + each of 8 prompts, each model decodes greedily to the
 * model's 512 positions; the match is the share of generated positions where the quantized model's
 * token equals fp32's (free-running, so one divergence costs the rest of its run), beside the
 * teacher-forced top-1 agreement on fp32's own greedy text. Perplexity: fp32 samples 8 sequences of
 * 512 tokens (BOS then 511 at temperature 1, seeded): 4,096 tokens; each model's perplexity on them.
 *
 *   npx tsx bench/quant/fidelity.ts [--group-size 32]
 *
 * Prints a table and writes bench/results/quant-fidelity-stories260K-<date>.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildModel, type BuildOptions } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';

const SHARED = join(import.meta.dirname, '../../../shared/models/stories260K');
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily went to the park', 'One day, a boy named Tom', 'The sun was', 'Mom said', 'There was a big tree', 'Ben and Sue'];
const POSITIONS = 512;
const BOS = 1;

const { values } = parseArgs({ options: { 'group-size': { type: 'string', default: '32' } } });
const groupSize = Number(values['group-size']);
const dir = mkdtempSync(join(tmpdir(), 'chorus-quant-fidelity-'));
const variants: Array<{ name: string; options: Partial<BuildOptions> }> = [
  { name: 'fp32', options: {} },
  { name: 'int8', options: { weights: 'int8' } },
  { name: `int4 g${groupSize}`, options: { weights: 'int4', groupSize } },
];

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** Greedy ids after `prompt` until POSITIONS in all. */
async function greedy(session: DecoderSession, prompt: number[]): Promise<number[]> {
  let out = await session.run({ inputIds: [prompt], lastOnly: true });
  const ids: number[] = [];
  const V = session.vocabSize;
  for (let length = prompt.length; length < POSITIONS; length++) {
    const next = argmax(out.logits.subarray(out.logits.length - V));
    ids.push(next);
    if (length + 1 < POSITIONS) out = await session.run({ inputIds: [[next]], cache: out.cache });
  }
  return ids;
}

/** Logits of every position of `ids` in one prefill: row t predicts ids[t + 1]. */
async function allLogits(session: DecoderSession, ids: number[]): Promise<Float32Array> {
  return (await session.run({ inputIds: [ids] })).logits;
}

/** The seeded sample of fp32's own text: BOS then 511 tokens at temperature 1. */
async function sample(session: DecoderSession, seed: number): Promise<number[]> {
  let state = seed;
  const random = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32;
  };
  const ids = [BOS];
  let out = await session.run({ inputIds: [ids], lastOnly: true });
  const V = session.vocabSize;
  while (ids.length < POSITIONS) {
    const row = out.logits.subarray(out.logits.length - V);
    const max = row.reduce((a, b) => Math.max(a, b), -Infinity);
    const weights = Array.from(row, (x) => Math.exp(x - max));
    let r = random() * weights.reduce((a, b) => a + b, 0);
    let next = 0;
    while (next < V - 1 && (r -= weights[next]!) > 0) next++;
    ids.push(next);
    if (ids.length < POSITIONS) out = await session.run({ inputIds: [[next]], cache: out.cache });
  }
  return ids;
}

function logSoftmaxAt(row: Float32Array, id: number): number {
  const max = row.reduce((a, b) => Math.max(a, b), -Infinity);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  return row[id]! - max - Math.log(sum);
}

const tokenizer = Llama2cTokenizer.load(join(SHARED, 'tok512.bin'));
const starts = [[BOS], ...PROMPTS.map((p) => [BOS, ...tokenizer.encode(p)])];
const sessions = new Map<string, DecoderSession>();
for (const v of variants) {
  buildModel({ source: join(SHARED, 'hf'), out: join(dir, v.name.replace(' ', '-')), ...v.options });
  sessions.set(v.name, await DecoderSession.open(join(dir, v.name.replace(' ', '-'))));
}
const reference = sessions.get('fp32')!;
const refGreedy = await Promise.all(starts.map((s) => greedy(reference, s)));
const texts: number[][] = [];
for (let i = 0; i < 8; i++) texts.push(await sample(reference, 1000 + i));

const rows = [];
for (const v of variants) {
  const session = sessions.get(v.name)!;
  const V = session.vocabSize;
  let same = 0;
  let total = 0;
  let bosSame = 0;
  let forcedSame = 0;
  const divergences: number[] = [];
  for (let s = 0; s < starts.length; s++) {
    const ids = await greedy(session, starts[s]!);
    const matches = ids.filter((id, i) => id === refGreedy[s]![i]).length;
    const first = ids.findIndex((id, i) => id !== refGreedy[s]![i]);
    divergences.push(first === -1 ? ids.length : first);
    if (s === 0) bosSame = matches / ids.length;
    same += matches;
    total += ids.length;
    // Teacher-forced: the model's top-1 on fp32's greedy text.
    const full = [...starts[s]!, ...refGreedy[s]!];
    const logits = await allLogits(session, full.slice(0, -1));
    for (let t = starts[s]!.length - 1; t < full.length - 1; t++) if (argmax(logits.subarray(t * V, (t + 1) * V)) === full[t + 1]) forcedSame++;
  }
  let nll = 0;
  let count = 0;
  for (const ids of texts) {
    const logits = await allLogits(session, ids);
    for (let t = 0; t < ids.length - 1; t++) {
      nll -= logSoftmaxAt(logits.subarray(t * V, (t + 1) * V), ids[t + 1]!);
      count++;
    }
  }
  rows.push({ weights: v.name, greedyMatch: same / total, greedyMatchFromBos: bosSame, teacherForcedTop1: forcedSame / total, medianFirstDivergence: divergences.sort((a, b) => a - b)[Math.floor(divergences.length / 2)]!, perplexity: Math.exp(nll / count), tokensScored: count, generated: total });
}
const fp32Ppl = rows[0]!.perplexity;
const table = rows.map((r) => ({ ...r, perplexityVsFp32: r.perplexity / fp32Ppl - 1 }));
process.stdout.write(`stories260K, CPU (MatMulNBits: int8 with int8 activations, int4 with float ones), greedy over ${table[0]!.generated} positions from BOS and ${PROMPTS.length} prompts; perplexity on fp32's ${texts.length * POSITIONS} sampled tokens\n`);
process.stdout.write('weights      greedy match  from BOS  first divergence (median)  teacher-forced top-1  perplexity  vs fp32\n');
for (const r of table) {
  const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
  process.stdout.write(`${r.weights.padEnd(12)} ${pct(r.greedyMatch).padStart(12)}  ${pct(r.greedyMatchFromBos).padStart(8)}  ${String(r.medianFirstDivergence).padStart(25)}  ${pct(r.teacherForcedTop1).padStart(20)}  ${r.perplexity.toFixed(4).padStart(10)}  ${(r.perplexityVsFp32 >= 0 ? '+' : '') + pct(r.perplexityVsFp32)}\n`);
}
for (const s of sessions.values()) await s.close();
rmSync(dir, { recursive: true, force: true });
const results = join(import.meta.dirname, '../results');
mkdirSync(results, { recursive: true });
const file = join(results, `quant-fidelity-stories260K-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(file, `${JSON.stringify({ model: 'stories260K', device: 'cpu', groupSize, prompts: PROMPTS, positions: POSITIONS, sampledTokens: texts.length * POSITIONS, rows: table }, null, 2)}\n`);
process.stdout.write(`wrote ${file}\n`);
