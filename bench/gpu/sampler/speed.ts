/**
 * The sampler kernel alone on the GPU: its time per call for batches of 1 and 64 rows of GPT-2's
 * vocabulary (50,257), fp16 logits, by setting: greedy through the sampler, temperature alone, top-k 50,
 * and top_p 0.9 over flat rows (random logits, as a model with random weights gives: the nucleus keeps
 * most of the vocabulary) and over peaked rows (a trained model's: a few ids hold p). Each figure is the
 * mean over SAMPLER_REPEAT runs between two CUDA events (the addon's sampleRows with `repeat`); each run
 * stages its rows' parameters in first, as an engine step does.
 *   node --import tsx bench/gpu/sampler/speed.ts [out.json]
 */
import { writeFileSync } from 'node:fs';
import { packSamplerRows } from '../../../src/generation/engines/native-sampler.ts';
import type { SamplerRow } from '../../../src/generation/core/sampler.ts';
import { loadNative } from '../../../src/native/index.ts';
import { toHalfBits } from '../../../src/util/half.ts';
import { uniformStream } from '../../../src/util/random.ts';

const { addon } = loadNative();
if (addon === undefined || addon.cudaDevices() === 0) throw new Error('sampler/speed.ts needs the native addon built with CUDA and a GPU');
const VOCAB = 50257;
const REPEAT = Number(process.env.SAMPLER_REPEAT ?? 50);
const random = uniformStream(7);

/** Rows of logits: flat (normal-ish, spread 1) or peaked (a few ids well above the rest). */
function logits(rows: number, peaked: boolean): Uint16Array {
  const out = new Float32Array(rows * VOCAB);
  for (let i = 0; i < out.length; i++) out[i] = (random() + random() + random() - 1.5) * 2;
  if (peaked) for (let r = 0; r < rows; r++) for (let j = 0; j < 20; j++) out[r * VOCAB + Math.floor(random() * VOCAB)] = 12 + random() * 4;
  return Uint16Array.from(out, (x) => toHalfBits(x));
}

function row(overrides: Partial<SamplerRow>): SamplerRow {
  return { temperature: 0.7, topP: 1, topK: 0, topLogProbs: 0, repetition: 1, presence: 0, frequency: 0, uniform: random(), seen: new Int32Array(0), bans: [], beamKeep: 0, beamScore: 0, ...overrides };
}

const settings: Array<[string, boolean, Partial<SamplerRow>]> = [
  ['greedy (temperature 0)', false, { temperature: 0 }],
  ['temperature 0.7', false, {}],
  ['temperature 0.7, top_k 50', false, { topK: 50 }],
  ['temperature 0.7, top_p 0.9, flat rows', false, { topP: 0.9 }],
  ['temperature 0.7, top_p 0.9, peaked rows', true, { topP: 0.9 }],
];
const results: Array<Record<string, unknown>> = [];
console.log('| setting | rows | kernel ms |');
console.log('| --- | ---: | ---: |');
for (const [name, peaked, overrides] of settings) {
  for (const rows of [1, 64]) {
    const input = logits(rows, peaked);
    const batch = packSamplerRows(Array.from({ length: rows }, (_, r) => ({ row: r, sampler: row(overrides) })));
    const got = addon.sampleRows(input, VOCAB, batch, true, REPEAT);
    results.push({ setting: name, rows, kernel_ms: got.kernelMs });
    console.log(`| ${name} | ${rows} | ${got.kernelMs!.toFixed(3)} |`);
  }
}
const out = process.argv[2];
if (out !== undefined) writeFileSync(out, `${JSON.stringify({ vocab: VOCAB, repeat: REPEAT, dtype: 'fp16', results }, null, 2)}\n`);
