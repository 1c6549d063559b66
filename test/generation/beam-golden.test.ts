/**
 * Beam search equals transformers' generate(num_beams=...) token for token, and in score, on the tiny
 * golden checkpoints: returned sequences, their order, length penalties (positive, negative, fractional),
 * the three early-stopping rules, a repetition penalty on log-probs, BART's forced BOS and EOS.
 * The expected outputs come from bench/gpu/beam (transformers 5.17, float32).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { OrtEngine, Seq2SeqEngine, type Engine } from '../../src/generation/index.ts';
import { BEAM_GOLDENS, type BeamCase } from '../../bench/gpu/beam/cases.ts';
import { engineBeams } from '../helpers/arch-golden.ts';
import { buildGolden, readGolden } from '../helpers/golden.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

interface BeamGolden {
  kind: 'decoder' | 'seq2seq';
  cases: Array<BeamCase & { sequences: number[][]; scores: number[] }>;
}

const root = scratchDir('chorus-beam-golden-');

for (const name of BEAM_GOLDENS) {
  test(`${name}: beam search equals transformers' (sequences, order and scores)`, async () => {
    const golden = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/golden', `${name}-beam.json`), 'utf8')) as BeamGolden;
    const dir = buildGolden(readGolden(name), root, name);
    const engine: Engine = golden.kind === 'seq2seq' ? await Seq2SeqEngine.open(dir) : await OrtEngine.open(dir);
    try {
      // All cases at once: beam groups share the batch with each other.
      const outputs = await Promise.all(golden.cases.map((c) => engineBeams(engine, c)));
      golden.cases.forEach((c, i) => {
        const label = `case ${i} (beams ${c.num_beams}, len_penalty ${c.length_penalty}, early_stopping ${String(c.early_stopping)})`;
        assert.deepEqual(outputs[i]!.sequences, c.sequences, label);
        c.scores.forEach((score, j) => assert.ok(Math.abs(outputs[i]!.scores[j]! - score) <= 1e-4 * Math.max(1, Math.abs(score)), `${label} score ${j}: ${outputs[i]!.scores[j]} vs ${score}`));
      });
    } finally {
      await engine.close();
    }
  });
}
