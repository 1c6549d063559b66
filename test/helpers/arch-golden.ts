/**
 * The golden fixtures of the newer decoder families (test/fixtures/arch/<family>/): a tiny random
 * checkpoint made by transformers' own init (config.json + model.safetensors) and golden.json, its
 * outputs in float32 on the CPU with eager attention.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import type { Engine, TokenEvent } from '../../src/generation/index.ts';
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

/** The returned sequences of one beam case, in rank order, with each one's score. */
export async function engineBeams(engine: Engine, c: ArchBeamCase): Promise<{ sequences: number[][]; scores: number[] }> {
  const params = {
    beam_width: c.num_beams,
    num_return_sequences: c.num_return_sequences,
    len_penalty: c.length_penalty,
    early_stopping: c.early_stopping,
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
