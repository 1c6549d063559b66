/**
 * Beam-search golden cases: the tiny golden checkpoints (rebuilt from their seeds) and, per prompt, beam
 * searches that differ in beams, returned sequences, length penalty, early stopping, a repetition
 * penalty and the end id (a token the model's greedy output holds, so beams do end early and the
 * length penalty decides between lengths). hf.py runs transformers' generate on them; its output is
 * test/fixtures/golden/<name>-beam.json, which test/generation/beam-golden.test.ts checks.
 * Usage: node --import tsx bench/gpu/beam/cases.ts [work-dir]   (default bench/gpu/beam/work)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { readGolden, unusedId } from '../../../test/helpers/golden.ts';

export interface BeamCase {
  prompt: number[];
  num_beams: number;
  num_return_sequences: number;
  length_penalty: number;
  early_stopping: boolean | 'never';
  repetition_penalty: number;
  eos_token_id: number;
  max_new_tokens: number;
}

export const BEAM_GOLDENS = ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny', 't5-tiny', 'bart-tiny', 'mbart-tiny'];

export function beamCases(name: string): BeamCase[] {
  const golden = readGolden(name);
  const unused = unusedId(golden);
  return golden.prompts.flatMap((prompt, p) => {
    const greedy = golden.greedy[p]!;
    const base = { prompt, num_beams: 4, max_new_tokens: 10, repetition_penalty: 1, early_stopping: false as boolean | 'never' };
    return [
      { ...base, num_return_sequences: 4, length_penalty: 1, eos_token_id: greedy[2]! },
      { ...base, num_return_sequences: 2, length_penalty: 2, eos_token_id: greedy[4]! },
      { ...base, num_return_sequences: 2, length_penalty: 0.5, early_stopping: true, eos_token_id: greedy[1]! },
      { ...base, num_return_sequences: 3, length_penalty: 1, early_stopping: 'never' as const, repetition_penalty: 1.5, eos_token_id: greedy[3]! },
      { ...base, num_beams: 3, num_return_sequences: 1, length_penalty: -1, eos_token_id: unused },
    ];
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const work = process.argv[2] ?? 'bench/gpu/beam/work';
  mkdirSync(work, { recursive: true });
  const specs = BEAM_GOLDENS.map((name) => {
    const golden = readGolden(name);
    const checkpoint = join(work, name);
    makeCheckpoint({ arch: golden.arch, size: 'tiny', seed: golden.seed, out: checkpoint });
    return { name, kind: golden.kind ?? 'decoder', arch: golden.arch, seed: golden.seed, checkpoint: name, cases: beamCases(name) };
  });
  writeFileSync(join(work, 'specs.json'), JSON.stringify(specs));
  console.log(`${specs.length} checkpoints, ${specs.reduce((n, s) => n + s.cases.length, 0)} cases in ${work}`);
}
