/**
 * The golden fixtures of the newer decoder families (test/fixtures/arch/<family>/): a tiny random
 * checkpoint made by transformers' own init (config.json + model.safetensors) and golden.json, its
 * outputs in float32 on the CPU with eager attention.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import type { Engine, TokenEvent } from '../../src/generation/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { ROOT } from './paths.ts';

export interface ArchBeamCase {
  prompt: number[];
  num_beams: number;
  num_return_sequences: number;
  max_new_tokens: number;
  length_penalty: number;
  early_stopping: boolean;
  eos_token_id: number;
  /** The new ids of each returned sequence, cut after the end id. */
  sequences: number[][];
  scores: number[];
}

export interface ArchGolden {
  generated_by: string;
  family: string;
  prompts: number[][];
  /** Per prompt, 4 teacher-forced ids. */
  forced: number[][];
  /** Per prompt, 64 greedy ids. */
  greedy: number[][];
  /** Per prompt, the prefill's last row then one row per forced step. */
  logits: number[][];
  /** The smallest gap between a greedy step's top two logits. */
  min_top2_gap?: number;
  beam: ArchBeamCase[];
  tokenizer?: { texts: string[]; ids: number[][]; chat: { messages: Array<{ role: string; content: string }>; rendered: string; ids: number[] } };
}

/** The fixture directory of `family`. */
export function archFixture(family: string): string {
  return join(ROOT, 'test/fixtures/arch', family);
}

/** The family's golden, or undefined when its fixture is not there. */
export function readArchGolden(family: string): ArchGolden | undefined {
  const file = join(archFixture(family), 'golden.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as ArchGolden) : undefined;
}

/** An id that none of the golden greedy outputs contains: an end id that cannot stop them early. */
export function unusedGreedyId(golden: ArchGolden): number {
  const used = new Set(golden.greedy.flat());
  let id = 0;
  while (used.has(id)) id++;
  return id;
}

/** Every prompt's greedy ids through `engine`, all submitted at once (they share batches). */
export async function engineGreedy(engine: Engine, golden: ArchGolden): Promise<number[][]> {
  const endId = unusedGreedyId(golden);
  return Promise.all(
    golden.prompts.map(async (prompt, i) => {
      const params = { temperature: 0, request_output_len: golden.greedy[i]!.length, end_id: endId };
      const events: TokenEvent[] = await lastValueFrom(engine.submit({ inputIds: prompt, params }).pipe(toArray()));
      return events.map((e) => e.token);
    }),
  );
}

/** The built model's logit rows (the prefill's last, then each forced id's) within 1e-4 and its greedy ids, against the golden. */
export async function assertSessionMatches(dir: string, golden: ArchGolden): Promise<void> {
  const session = await DecoderSession.open(dir);
  try {
    const V = session.vocabSize;
    let row = 0;
    let worst = 0;
    const compare = (logits: Float32Array): void => {
      const expected = golden.logits[row++]!;
      assert.equal(expected.length, V);
      for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs(logits[i]! - expected[i]!));
    };
    for (const [p, prompt] of golden.prompts.entries()) {
      let out = await session.run({ inputIds: [prompt] });
      compare(out.logits.subarray((out.dims[1] - 1) * V));
      for (const token of golden.forced[p]!) {
        out = await session.run({ inputIds: [[token]], cache: out.cache });
        compare(out.logits);
      }
      assert.deepEqual(await session.greedy(prompt, golden.greedy[p]!.length), golden.greedy[p], `prompt ${p}`);
    }
    assert.equal(row, golden.logits.length);
    assert.ok(worst <= 1e-4, `max |diff| ${worst}`);
  } finally {
    await session.close();
  }
}

/** Every golden greedy run and beam search through `engine`, all submitted at once (rows share batches): ids equal, scores within 1e-4. */
export async function assertEngineMatches(engine: Engine, golden: ArchGolden): Promise<void> {
  const [greedy, beams] = await Promise.all([engineGreedy(engine, golden), Promise.all(golden.beam.map((c) => engineBeams(engine, c)))]);
  greedy.forEach((ids, p) => assert.deepEqual(ids, golden.greedy[p], `greedy, prompt ${p}`));
  golden.beam.forEach((c, i) => {
    const label = `beam case ${i} (beams ${c.num_beams}, length_penalty ${c.length_penalty})`;
    assert.deepEqual(beams[i]!.sequences, c.sequences, label);
    c.scores.forEach((score, j) => assert.ok(Math.abs(beams[i]!.scores[j]! - score) <= 1e-4 * Math.max(1, Math.abs(score)), `${label} score ${j}: ${beams[i]!.scores[j]} vs ${score}`));
  });
}

/** A beam search as transformers' generate() takes it: an arch golden's case, or bench/gpu/beam's. */
export type BeamRequest = Pick<ArchBeamCase, 'prompt' | 'num_beams' | 'num_return_sequences' | 'max_new_tokens' | 'length_penalty' | 'eos_token_id'> & {
  early_stopping: boolean | 'never';
  repetition_penalty?: number;
};

/** The returned sequences of one beam search, in rank order, with each one's score. */
export async function engineBeams(engine: Engine, c: BeamRequest): Promise<{ sequences: number[][]; scores: number[] }> {
  const params = {
    beam_width: c.num_beams,
    num_return_sequences: c.num_return_sequences,
    len_penalty: c.length_penalty,
    early_stopping: c.early_stopping,
    ...(c.repetition_penalty === undefined ? {} : { repetition_penalty: c.repetition_penalty }),
    end_id: c.eos_token_id,
    request_output_len: c.max_new_tokens,
  };
  const events: TokenEvent[] = await lastValueFrom(engine.submit({ inputIds: c.prompt, params }).pipe(toArray()));
  const sequences: number[][] = [];
  const scores: number[] = [];
  for (const e of events) {
    (sequences[e.sequence!] ??= []).push(e.token);
    if (e.score !== undefined) scores[e.sequence!] = e.score;
  }
  return { sequences, scores };
}
