/**
 * The native engine's sampler (src/native/sampling.h) against the TypeScript processors and sampler it
 * stands in for: 1,000 random rows per processor, with their sequences' real state (prompt, output,
 * counts, the current top_p) and the draw each Sequence takes from its own stream. The vocabulary (5,003)
 * is larger than the 2,048 ids the sampler gathers once top-k or a bound on the nucleus allows, so rows
 * take both its paths (spread-out rows gather, flat ones do not). The processed logits must be
 * identical, the chosen tokens too, and the log-probabilities within 1e-9 on the host (1e-5 on the GPU,
 * whose sums run in another order). On the host always (when the addon is built); on the GPU when one is
 * visible.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Observable } from 'rxjs';
import { packSamplerRows } from '../../src/generation/engines/native-sampler.ts';
import { greedy, processLogits, sample, validateSamplingParams, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { BeamSearch } from '../../src/generation/core/beam-search.ts';
import type { SamplerRow } from '../../src/generation/core/sampler.ts';
import { Sequence, topLogProbs } from '../../src/generation/core/sequence.ts';
import { MAX_TOP_LOGPROBS } from '../../src/native/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { fromHalfBits, toHalfBits } from '../../src/util/half.ts';
import { uniformStream } from '../../src/util/random.ts';

const { addon } = loadNative();
const skip = addon === undefined ? 'the native addon is not built (npm run build:native)' : false;
const VOCAB = 5003;
const END = VOCAB - 1;
const ROWS = 1000;

/** A sequence of `params` that has generated `output` after `prompt`. */
function sequenceAfter(prompt: number[], output: number[], params: SamplingParams, vocab = VOCAB): Sequence {
  let made: Sequence | undefined;
  new Observable<TokenEvent>((subscriber) => {
    made = new Sequence(prompt, validateSamplingParams({ request_output_len: 1000, ...params }, vocab), { vocabSize: vocab, endIds: [vocab - 1] }, subscriber, () => {});
  }).subscribe();
  for (const token of output) made!.accept({ token, logProb: 0 });
  return made!;
}

interface Row {
  logits: Float32Array;
  sequence: Sequence;
  sampler: SamplerRow;
}

/** Random rows: normal logits of various spreads, some rounded to fp16 or to quarters (ties). */
function randomRows(seed: number, paramsOf: (random: () => number, output: number[]) => SamplingParams, half: boolean): Row[] {
  const random = uniformStream(seed);
  const normal = (): number => Math.sqrt(-2 * Math.log(random())) * Math.cos(2 * Math.PI * random());
  const id = (): number => Math.floor(random() * (VOCAB - 1));
  return Array.from({ length: ROWS }, (_, r) => {
    const spread = 0.5 + random() * 6;
    const quarters = r % 10 === 3;
    const logits = new Float32Array(VOCAB).map(() => {
      const x = normal() * spread;
      return quarters ? Math.round(x * 4) / 4 : half || r % 3 === 1 ? fromHalfBits(toHalfBits(x)) : x;
    });
    const prompt = Array.from({ length: 1 + Math.floor(random() * 30) }, id);
    const output = Array.from({ length: Math.floor(random() * 40) }, () => (random() < 0.3 && prompt.length > 0 ? prompt[Math.floor(random() * prompt.length)]! : id()));
    const sequence = sequenceAfter(prompt, output, paramsOf(random, output));
    return { logits, sequence, sampler: sequence.samplerRow()! };
  });
}

/** What the TypeScript engine computes for a row. */
function reference(row: Row): { processed: Float32Array; token: number; logProb: number } {
  const s = row.sequence;
  const processed = processLogits(s.processors, row.logits, { promptIds: s.contextIds, outputIds: s.outputIds, outputCounts: s.outputCounts, topP: s.topP });
  const choice = s.params.temperature === 0 ? greedy(processed) : sample(processed, row.sampler.uniform);
  return { processed, ...choice };
}

function check(rows: Row[], half: boolean, device: boolean, vocab = VOCAB): void {
  const flat = new Float32Array(rows.length * vocab);
  rows.forEach((row, r) => flat.set(row.logits, r * vocab));
  const input = half ? Uint16Array.from(flat, (x) => toHalfBits(x)) : flat;
  const got = addon!.sampleRows(input, vocab, packSamplerRows(rows.map((row, r) => ({ row: r, sampler: row.sampler }))), device);
  const tolerance = device ? 1e-5 : 1e-9;
  rows.forEach((row, r) => {
    const want = reference(row);
    for (let v = 0; v < vocab; v++) {
      const value = got.processed[r * vocab + v]!;
      if (!Object.is(value, want.processed[v])) assert.fail(`row ${r}: processed logit ${v} is ${value}, the processors give ${want.processed[v]}`);
    }
    assert.equal(got.tokens[r], want.token, `row ${r}: token`);
    assert.ok(Object.is(got.logProbs[r], want.logProb) || Math.abs(got.logProbs[r]! - want.logProb) <= tolerance, `row ${r}: log-probability ${got.logProbs[r]} vs ${want.logProb}`);
    const top = topLogProbs(want.processed, row.sequence.params.top_logprobs);
    assert.equal(got.topCounts[r], row.sequence.params.top_logprobs === 0 ? 0 : top.length, `row ${r}: top_logprobs count`);
    top.forEach((entry, j) => {
      assert.equal(got.topTokens[r * MAX_TOP_LOGPROBS + j], entry.token, `row ${r}: top_logprobs ${j}`);
      assert.ok(Math.abs(got.topLogProbs[r * MAX_TOP_LOGPROBS + j]! - entry.logProb) <= tolerance, `row ${r}: top_logprobs ${j} log-probability`);
    });
  });
}

const sampled = { temperature: 1 };
const cases: Array<[string, (random: () => number, output: number[]) => SamplingParams]> = [
  ['repetition penalty, greedy', (random) => ({ temperature: 0, repetition_penalty: 0.5 + random() * 2 })],
  ['repetition penalty, sampled', (random) => ({ ...sampled, repetition_penalty: 0.5 + random() * 2 })],
  ['presence penalty', (random) => ({ ...sampled, presence_penalty: random() * 4 - 2 })],
  ['frequency penalty', (random) => ({ ...sampled, frequency_penalty: random() * 4 - 2 })],
  [
    'bad words',
    (random, output) => ({
      ...sampled,
      // Phrases that end the output so far (they ban their last id), and some that do not.
      bad_words: [[output.at(-1) ?? 5, Math.floor(random() * 500)], [Math.floor(random() * 500)], [1, 2, 3], ...(output.length > 1 ? [[...output.slice(-2), 7]] : [])],
    }),
  ],
  ['min length', (random) => ({ ...sampled, min_length: Math.floor(random() * 60) })],
  ['temperature', (random) => ({ temperature: 0.05 + random() * 3 })],
  ['top-k', (random) => ({ ...sampled, runtime_top_k: 1 + Math.floor(random() * (random() < 0.1 ? VOCAB : 60)) })],
  ['top-p', (random) => ({ ...sampled, runtime_top_p: 0.02 + random() * 0.97 })],
  ['top_logprobs', (random) => ({ ...sampled, runtime_top_k: random() < 0.5 ? 5 : 0, top_logprobs: 1 + Math.floor(random() * 20) })],
  ['top-p, factual nucleus (decayed p)', (random) => ({ ...sampled, runtime_top_p: 0.3 + random() * 0.69, top_p_decay: 0.5 + random() * 0.5, top_p_min: 0.05 })],
  [
    'everything at once',
    (random, output) => ({
      temperature: random() < 0.2 ? 0 : 0.2 + random() * 1.5,
      repetition_penalty: 0.8 + random(),
      presence_penalty: random() - 0.5,
      frequency_penalty: random() - 0.5,
      bad_words: [[output.at(-1) ?? 5, 9]],
      min_length: Math.floor(random() * 50),
      runtime_top_k: Math.floor(random() * 100),
      runtime_top_p: 0.1 + random() * 0.9,
      top_logprobs: Math.floor(random() * 4),
    }),
  ],
];

describe('the native sampler', { skip }, () => {
  const gpu = addon !== undefined && addon.cudaDevices() > 0;
  for (const [index, [name, paramsOf]] of cases.entries()) {
    test(`${name}: 1,000 rows as the TypeScript processors and sampler${gpu ? ', host and GPU' : ''}`, () => {
      const rows = randomRows(100 + index, paramsOf, false);
      check(rows, false, false);
      if (gpu) check(rows, false, true);
    });
  }

  test(`fp16 logits: widened as the TypeScript engine widens them${gpu ? ', host and GPU' : ''}`, () => {
    const rows = randomRows(7, cases.at(-1)![1], true);
    check(rows, true, false);
    if (gpu) check(rows, true, true);
  });

  test(`beam mode: 1,000 beams give BeamSearch's continuations${gpu ? ', host and GPU' : ''}`, () => {
    const random = uniformStream(21);
    const normal = (): number => Math.sqrt(-2 * Math.log(random())) * Math.cos(2 * Math.PI * random());
    const rows: Array<{ logits: Float32Array; search: BeamSearch; beam: number }> = [];
    for (let i = 0; i < ROWS; i++) {
      const spread = 0.5 + random() * 6;
      const row = (): Float32Array => new Float32Array(VOCAB).map(() => (i % 3 === 1 ? fromHalfBits(toHalfBits(normal() * spread)) : normal() * spread));
      const params = validateSamplingParams(
        {
          beam_width: 1 + Math.floor(random() * 10),
          request_output_len: 50,
          temperature: random() < 0.5 ? 1 : 0.3 + random(),
          repetition_penalty: random() < 0.5 ? 1 : 0.8 + random(),
          presence_penalty: random() < 0.7 ? 0 : random() - 0.5,
          frequency_penalty: random() < 0.7 ? 0 : random() - 0.5,
          min_length: Math.floor(random() * 6),
          bad_words: random() < 0.3 ? [[Math.floor(random() * VOCAB)], [3, Math.floor(random() * VOCAB)]] : [],
          beam_search_diversity_rate: random() < 0.3 ? random() : 0,
        },
        VOCAB,
      );
      const search = new BeamSearch([1, 2, 3, Math.floor(random() * VOCAB)], params, [END]);
      // A few steps in, so beams have scores, counts and histories of their own.
      for (let step = Math.floor(random() * 5); step > 0 && !search.done; step--) search.step(() => row());
      if (search.done) continue;
      rows.push({ logits: row(), search, beam: search.generated === 0 ? 0 : Math.floor(random() * params.beam_width) });
    }
    const flat = new Float32Array(rows.length * VOCAB);
    rows.forEach((row, r) => flat.set(row.logits, r * VOCAB));
    const batch = packSamplerRows(rows.map((row, r) => ({ row: r, sampler: row.search.samplerRow(row.beam) })));
    for (const device of gpu ? [false, true] : [false]) {
      const got = addon!.sampleRows(flat, VOCAB, batch, device);
      rows.forEach((row, r) => {
        const want = row.search.continuations(row.beam, row.logits);
        assert.equal(got.topCounts[r], want.length, `beam row ${r}: continuations`);
        want.forEach((c, j) => {
          assert.equal(got.topTokens[r * MAX_TOP_LOGPROBS + j], c.token, `beam row ${r}: continuation ${j} (${device ? 'GPU' : 'host'})`);
          const logProb = got.topLogProbs[r * MAX_TOP_LOGPROBS + j]!;
          assert.ok(Object.is(logProb, c.logProb) || Math.abs(logProb - c.logProb) <= (device ? 1e-5 : 0), `beam row ${r}: continuation ${j} log-probability ${logProb} vs ${c.logProb}`);
        });
      });
    }
    assert.ok(rows.length > 900, `${rows.length} beams compared`);
  });

  test('draws follow the processed distribution (20,000 draws of one row)', () => {
    const random = uniformStream(3);
    const logits = new Float32Array(VOCAB).map(() => random() * 6);
    const params = { temperature: 0.7, runtime_top_k: 12 };
    const draws = 20_000;
    const counts = new Map<number, number>();
    const rows = Array.from({ length: draws }, () => ({ logits, sequence: sequenceAfter([1], [], params) }));
    // One stream: each row takes the next draw of the same seeded sequence.
    const stream = uniformStream(99);
    const batch = rows.map((row, r) => ({ row: r, sampler: { ...row.sequence.samplerRow()!, uniform: stream() } }));
    const flat = new Float32Array(draws * VOCAB);
    rows.forEach((row, r) => flat.set(row.logits, r * VOCAB));
    const devices = gpu ? [false, true] : [false];
    for (const device of devices) {
      counts.clear();
      const got = addon!.sampleRows(flat, VOCAB, packSamplerRows(batch), device);
      for (const token of got.tokens) counts.set(token, (counts.get(token) ?? 0) + 1);
      const processed = got.processed.subarray(0, VOCAB);
      const max = Math.max(...processed);
      const weights = Array.from(processed, (x) => Math.exp(x - max));
      const total = weights.reduce((a, b) => a + b, 0);
      let distance = 0;
      weights.forEach((w, token) => (distance += Math.abs(w / total - (counts.get(token) ?? 0) / draws)));
      assert.equal(counts.size, 12, 'only the top 12 ids are drawn');
      assert.ok(distance / 2 < 0.02, `total variation ${distance / 2} (${device ? 'GPU' : 'host'})`);
    }
  });

  test(`top-p over rows of exact ties and of -inf, as the TypeScript processors${gpu ? ', host and GPU' : ''}`, () => {
    const random = uniformStream(31);
    const shapes: Array<[(v: number) => number, number]> = [
      [() => 0, 0.9],
      [() => 0, 0.3],
      [() => 2.5, 0.5],
      [(v) => (v % 2 === 0 ? 0 : -3), 0.9],
      [(v) => (v % 2 === 0 ? 0 : -3), 0.3],
      [(v) => (v % 3 === 0 ? -Infinity : 1), 0.5],
      [() => -Infinity, 0.9],
    ];
    const rows: Row[] = shapes.map(([value, topP]) => {
      const sequence = sequenceAfter([1], [], { temperature: 1, runtime_top_p: topP });
      return { logits: Float32Array.from({ length: VOCAB }, (_, v) => value(v)), sequence, sampler: { ...sequence.samplerRow()!, uniform: random() } };
    });
    check(rows, false, false);
    if (gpu) check(rows, false, true);
  });

  test(`top-p and top-k where one of the sampler's buckets holds 65,536 ids or more, as the TypeScript processors${gpu ? ', host and GPU' : ''}`, () => {
    // 70,000 ids of one value (its bucket's fixed-point sum could wrap), and rows where most ids share it.
    const vocab = 70_000;
    const random = uniformStream(41);
    const shapes: Array<[(v: number) => number, SamplingParams]> = [
      [() => 1, { temperature: 1, runtime_top_p: 0.6 }],
      [(v) => (v % 700 === 0 ? 2 : 1), { temperature: 0.8, runtime_top_p: 0.9 }],
      [(v) => (v % 700 === 0 ? 2 : 1), { temperature: 1, runtime_top_k: 30_000 }],
      [(v) => (v < 100 ? 3 + v / 100 : 1), { temperature: 1, runtime_top_k: 50, runtime_top_p: 0.8 }],
      // Spread-out values for contrast: the buckets serve.
      [(v) => Math.fround(Math.sin(v * 12.9898) * 3), { temperature: 0.7, runtime_top_p: 0.9 }],
      [(v) => Math.fround(Math.sin(v * 12.9898) * 3), { temperature: 0.7, runtime_top_k: 40 }],
    ];
    const rows: Row[] = shapes.map(([value, params]) => {
      const sequence = sequenceAfter([1], [], params, vocab);
      return { logits: Float32Array.from({ length: vocab }, (_, v) => value(v)), sequence, sampler: { ...sequence.samplerRow()!, uniform: random() } };
    });
    check(rows, false, false, vocab);
    if (gpu) check(rows, false, true, vocab);
  });

  test('refuses ids outside the vocabulary and parameters out of range, naming them', () => {
    const row = sequenceAfter([1], [], sampled).samplerRow()!;
    const logits = new Float32Array(VOCAB);
    const batch = packSamplerRows([{ row: 0, sampler: row }]);
    assert.throws(() => addon!.sampleRows(logits, VOCAB, { ...batch, bans: Int32Array.from([VOCAB]), banOffsets: Int32Array.from([0, 1]) }, false), /sample.bans has an id outside the vocabulary/);
    assert.throws(() => addon!.sampleRows(logits, VOCAB, { ...batch, rows: Int32Array.from([1]) }, false), /sample.rows has a row outside the logits/);
    assert.throws(() => addon!.sampleRows(logits, VOCAB, { ...batch, params: batch.params.map((x, i) => (i === 5 ? 1.5 : x)) }, false), /a draw in \(0, 1\)/);
    assert.throws(() => addon!.sampleRows(logits, VOCAB, { ...batch, seenOffsets: Int32Array.from([0, 3]) }, false), /sample.seenOffsets/);
  });
});
