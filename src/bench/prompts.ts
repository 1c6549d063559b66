/**
 * Prompts for `chorus bench`: from a dataset file (JSON lines: a text field of each record; any other
 * file: one prompt per non-empty line), or synthetic text of a given token length. Token lengths are the
 * server's: synthetic text is calibrated by asking the server how many tokens a draft is (a one-token
 * request's `usage`), so `--prompt-tokens 128` means 128 tokens of the pipeline's own tokenizer.
 */
import { readFileSync } from 'node:fs';
import { ChorusError, invalidArgument } from '../errors.ts';

/** Fields tried, in order, for the text of a JSON-lines record. */
export const TEXT_FIELDS = ['prompt', 'text', 'text_input', 'article', 'question', 'input', 'content'];

export function loadDataset(path: string, field?: string): string[] {
  let raw: string;
  try {
    raw = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ChorusError('CHORUS_NOT_FOUND', `--dataset ${path}: ${(error as Error).message}`, { param: '--dataset', value: path });
  }
  const lines = raw.split(/\r?\n/).filter((line) => line.trim() !== '');
  const jsonl = /\.jsonl?$/i.test(path);
  const prompts = lines.map((line, i) => {
    if (!jsonl) return line.trim();
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch (error) {
      throw invalidArgument('--dataset', `JSON lines (line ${i + 1}: ${(error as Error).message})`, line.slice(0, 80));
    }
    if (typeof record === 'string') return record;
    const fields = field === undefined ? TEXT_FIELDS : [field];
    const found = fields.find((f) => typeof (record as Record<string, unknown>)[f] === 'string');
    if (found === undefined) throw invalidArgument(field === undefined ? '--dataset' : '--dataset-field', `records with a string field ${fields.join(' or ')} (line ${i + 1})`, Object.keys(record as object));
    return (record as Record<string, string>)[found]!;
  });
  if (prompts.length === 0) throw invalidArgument('--dataset', 'a file with at least one prompt', path);
  return prompts;
}

const WORDS = (
  'the of and to in a is that for it as was with be by on not he this are or his from at which but have an they ' +
  'you were her all she there would their we him been has when who will more no if out so said what up its about ' +
  'into than them can only other new some could time these two may then do first any my now such like our over man ' +
  'me even most made after also did many before must through back years where much your way well down should because ' +
  'each just those people how too little state good very make world still own see men work long get here between both ' +
  'life being under never day same another know while last might us great old year off come since against go came right ' +
  'used take three garden river morning story friend light house water small number between country'
).split(' ');

/** `words` pseudo-random words, seeded: the same seed gives the same text. */
export function syntheticText(words: number, seed: number): string {
  let state = (seed * 2654435761 + 1) >>> 0;
  const out: string[] = [];
  for (let i = 0; i < words; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out.push(WORDS[state % WORDS.length]!);
  }
  return out.join(' ');
}

/**
 * How many of `words` make `tokens` tokens, by the server's count: `measure` returns a text's token count
 * (undefined when the server reports none: then 0.75 words per token is assumed). The first guess comes
 * from a sample of 16 words (a tokenizer of a small vocabulary takes several tokens a word, and a guess
 * of 0.75 words a token would overshoot a small model's context), then a few measured guesses, each
 * scaled by the last ratio; the closest wins.
 */
export async function fitWords(words: readonly string[], tokens: number, measure: (text: string) => Promise<number | undefined>): Promise<{ words: number; measured: number | undefined }> {
  const sample = Math.min(words.length, 16, Math.max(1, Math.round(tokens / 4)));
  const sampled = await measure(words.slice(0, sample).join(' '));
  const perToken = sampled === undefined || sampled === 0 ? 0.75 : sample / sampled;
  let keep = Math.min(words.length, Math.max(1, Math.round(tokens * perToken)));
  let best: { words: number; measured: number | undefined } = { words: keep, measured: undefined };
  if (sampled === undefined) return best;
  const tried = new Set<number>();
  for (let attempt = 0; attempt < 8 && !tried.has(keep); attempt++) {
    tried.add(keep);
    const measured = await measure(words.slice(0, keep).join(' '));
    if (measured === undefined) return best;
    if (best.measured === undefined || Math.abs(measured - tokens) < Math.abs(best.measured - tokens)) best = { words: keep, measured };
    if (measured === tokens) break;
    const next = Math.round((keep * tokens) / Math.max(1, measured));
    keep = Math.min(words.length, Math.max(1, next === keep ? keep + Math.sign(tokens - measured) : next));
  }
  return best;
}

/** `count` synthetic prompts of about `tokens` tokens each (see `fitWords`). */
export async function syntheticPrompts(tokens: number, count: number, measure: (text: string) => Promise<number | undefined>): Promise<{ prompts: string[]; measured: number | undefined }> {
  const fit = await fitWords(syntheticText(4 * tokens + 16, 0).split(' '), tokens, measure);
  return { prompts: Array.from({ length: count }, (_, i) => syntheticText(fit.words, i)), measured: fit.measured };
}
