/**
 * FasterTransformer's word lists. `bad_words` and `stop_words` arrive as CSV strings ("Hawks, Hawks"),
 * one per batch row, and become an int32 tensor of shape [batch, 2, L]: row 0 holds the ids of every
 * phrase one after another, row 1 the cumulative end offset of each phrase; row 0 is padded with 0 and
 * row 1 with -1 up to L, the longest row 0 of the batch (at least 1).
 */
import { parse } from 'csv-parse/sync';
import { invalidArgument } from '../errors.ts';
import type { Tokenizer } from './tokenizer.ts';

/** An int32 tensor in FT's `[batch, 2, L]` word-list layout. */
export interface WordListTensor {
  data: Int32Array;
  dims: [number, 2, number];
}

/** Splits one FT CSV string into its phrases: `"Hawks, Hawks"` -> `["Hawks", " Hawks"]`. */
export function parseWordCsv(csv: string): string[] {
  if (csv === '') return [];
  const rows = parse(csv, { relax_quotes: true }) as string[][];
  return rows.flat();
}

/** Tokenizes each row's phrases (no special tokens) into the `[batch, 2, L]` layout. */
export function toWordList(tokenizer: Tokenizer, csvPerRow: readonly string[]): WordListTensor {
  const rows = csvPerRow.map((csv, row) => {
    if (typeof csv !== 'string') throw invalidArgument(`words[${row}]`, 'a CSV string of phrases', csv);
    const ids: number[] = [];
    const offsets: number[] = [];
    for (const phrase of parseWordCsv(csv)) {
      const phraseIds = tokenizer.encode(phrase, { addSpecialTokens: false });
      if (phraseIds.length === 0) continue;
      ids.push(...phraseIds);
      offsets.push(ids.length);
    }
    return { ids, offsets };
  });
  const width = Math.max(1, ...rows.map((r) => r.ids.length));
  const data = new Int32Array(rows.length * 2 * width);
  rows.forEach(({ ids, offsets }, row) => {
    const base = row * 2 * width;
    data.set(ids, base);
    data.fill(-1, base + width, base + 2 * width);
    data.set(offsets, base + width);
  });
  return { data, dims: [rows.length, 2, width] };
}
