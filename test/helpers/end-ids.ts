/**
 * The families' golden fixtures (test/fixtures/arch) given several end ids, chosen among the ids of
 * their golden greedy runs, so that the expected output of each prompt is its golden run cut after the
 * first end id it meets: the end-id tests (test/generation/end-ids.test.ts) and their CUDA run
 * (bench/gpu/arch/end-ids.ts).
 */
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ArchGolden } from './arch-golden.ts';

/** A family, its end ids and the file that names them. */
export interface EndIdCase {
  family: string;
  endIds: readonly number[];
  where: 'config.json' | 'generation_config.json';
}

/**
 * Llama 3's in config.json (as 3.1 Instruct's), the others' in generation_config.json over config.json's
 * one id (Gemma 2's config id, 2, is its golden run's first token for prompt 1: the generation config
 * must win over it).
 */
export const END_ID_CASES: readonly EndIdCase[] = [
  { family: 'llama3', endIds: [24, 224], where: 'config.json' },
  { family: 'phi3', endIds: [27, 375], where: 'generation_config.json' },
  { family: 'gemma2', endIds: [322, 474], where: 'generation_config.json' },
];

/** The golden greedy run of each prompt cut after its first end id, and why it ends. */
export function expectedRuns(golden: ArchGolden, endIds: readonly number[]): Array<{ ids: number[]; reason: string }> {
  return golden.greedy.map((ids) => {
    const end = ids.findIndex((id) => endIds.includes(id));
    return end === -1 ? { ids, reason: 'length' } : { ids: ids.slice(0, end + 1), reason: 'end_id' };
  });
}

/** The fixture `fixture` copied to `out` with the case's end ids written where the case says. */
export function writeEndIdSource(fixture: string, out: string, c: EndIdCase): void {
  mkdirSync(out, { recursive: true });
  copyFileSync(join(fixture, 'model.safetensors'), join(out, 'model.safetensors'));
  const config = JSON.parse(readFileSync(join(fixture, 'config.json'), 'utf8')) as Record<string, unknown>;
  if (c.where === 'config.json') config.eos_token_id = [...c.endIds];
  else writeFileSync(join(out, 'generation_config.json'), JSON.stringify({ bos_token_id: config.bos_token_id, eos_token_id: c.endIds }));
  writeFileSync(join(out, 'config.json'), JSON.stringify(config));
}
