/**
 * The golden fixtures of the newer decoder families (test/fixtures/arch/<family>/): a tiny checkpoint
 * made by transformers (config.json, model.safetensors) and golden.json, its outputs in float32 on the
 * CPU with eager attention: greedy ids, logits and beam searches.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import type { Engine, TokenEvent } from '../../src/generation/index.ts';
import { ROOT } from './paths.ts';

/** One beam search as transformers' generate ran it, and what it returned (new ids, cut after the end id). */
export interface ArchBeamCase {
  prompt: number[];
  num_beams: number;
  num_return_sequences: number;
  max_new_tokens: number;
  length_penalty: number;
  early_stopping: boolean | 'never';
  eos_token_id: number;
  sequences: number[][];
  scores: number[];
}

export interface ArchGolden {
  family: string;
  prompts: number[][];
  /** Per prompt, the ids fed one at a time after it. */
  forced: number[][];
  greedy: number[][];
  /** Per prompt in order: the prefill's last position, then one row per forced id. */
  logits: number[][];
  beam: ArchBeamCase[];
}

/** The directory of `family`'s checkpoint and golden.json. */
export function archFixture(family: string): string {
  return join(ROOT, 'test/fixtures/arch', family);
}

/** Reads `dir`/golden.json; logits come as rows whether stored per prompt or flat. */
export function readArchGolden(dir: string): ArchGolden {
  const golden = JSON.parse(readFileSync(join(dir, 'golden.json'), 'utf8')) as Omit<ArchGolden, 'logits'> & { logits: Array<number[] | number[][]> };
  const logits = golden.logits.flatMap((rows) => (Array.isArray(rows[0]) ? (rows as number[][]) : [rows as number[]]));
  return { ...golden, logits };
}

/** Compares logit rows in order: the largest difference, and whether every row was used. */
export class LogitRows {
  private row = 0;
  worst = 0;
  constructor(private readonly golden: ArchGolden) {}

  compare(logits: Float32Array): void {
    const expected = this.golden.logits[this.row++]!;
    if (expected.length !== logits.length) throw new Error(`logit row ${this.row - 1} has ${expected.length} values, the model ${logits.length}`);
    for (let i = 0; i < logits.length; i++) this.worst = Math.max(this.worst, Math.abs(logits[i]! - expected[i]!));
  }

  get used(): number {
    return this.row;
  }
}

/** A greedy generation of `steps` ids through `engine`, ending early only at `endId`. */
export async function engineGreedy(engine: Engine, prompt: number[], steps: number, endId: number): Promise<number[]> {
  const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: steps, end_id: endId } }).pipe(toArray()));
  return events.map((e) => e.token);
}

/** The returned sequences of one beam search through `engine`, in rank order, with each one's score. */
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
