import { lastValueFrom, toArray } from 'rxjs';
import type { Engine, SamplingParams } from '../../src/generation/index.ts';

/** Six requests for four slots: greedy and seeded sampled ones alternating, of lengths 3 to 40. */
export const STAGGERED_PROMPTS = [[3, 4, 5], [6], [7, 8, 9, 10, 11, 12], [13, 14], [15, 16, 17], [18, 19, 20, 21]];
const LENGTHS = [30, 5, 22, 9, 40, 3];

/** Request i's parameters: greedy for even i, sampled with a seed of its own (and a penalty) for odd. */
export function staggeredParams(i: number): SamplingParams {
  return i % 2 === 0
    ? { temperature: 0, request_output_len: LENGTHS[i]! }
    : { temperature: 0.9, runtime_top_p: 0.9, runtime_top_k: 50, frequency_penalty: 0.3, random_seed: 100 + i, request_output_len: LENGTHS[i]! };
}

async function tokensOf(engine: Engine, i: number): Promise<number[]> {
  const events = await lastValueFrom(engine.submit({ inputIds: STAGGERED_PROMPTS[i]!, params: staggeredParams(i), stream: true }).pipe(toArray()));
  return events.map((e) => e.token);
}

/** Each request's tokens run alone, one after another. */
export async function staggeredAlone(engine: Engine): Promise<number[][]> {
  const alone: number[][] = [];
  for (let i = 0; i < STAGGERED_PROMPTS.length; i++) alone.push(await tokensOf(engine, i));
  return alone;
}

/** Each request's tokens with the requests arriving 3 ms apart, each while the earlier ones run. */
export function staggeredTogether(engine: Engine): Promise<number[][]> {
  return Promise.all(STAGGERED_PROMPTS.map((_, i) => new Promise<void>((resolve) => setTimeout(resolve, i * 3)).then(() => tokensOf(engine, i))));
}
