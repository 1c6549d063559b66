/**
 * What the decoder-only engines (OrtEngine, NativeEngine) share about the rows of their running batch:
 * the model's ids and context from its config, which rows stay when requests leave, and stepping every
 * member over its rows.
 */
import { checkedEndIds, endIdsOf } from '../../util/end-ids.ts';
import type { ActiveRequest, ModelIds } from './sequence.ts';

/**
 * A decoder-only model's ids and context length, as the engines read them from its config.json and
 * generation_config.json (`generation`, when it has one): the end ids as transformers resolves them,
 * unless `endIds` (a model definition's end_ids) replaces them.
 */
export function decoderModel(config: Record<string, unknown>, vocabSize: number, generation?: Record<string, unknown>, endIds?: readonly number[]): { model: ModelIds; context: number } {
  const bos = config.bos_token_id;
  return {
    model: { vocabSize, endIds: endIds === undefined ? endIdsOf(config, generation, vocabSize) : checkedEndIds(endIds, vocabSize), bosId: typeof bos === 'number' ? bos : undefined },
    context: Number(config.max_position_embeddings ?? config.n_positions ?? 2048),
  };
}

/** The members that stay when `left` leave, and the rows they hold now (in row order). */
export function keptRows(members: readonly ActiveRequest[], left: readonly ActiveRequest[]): { members: ActiveRequest[]; rows: number[] } {
  const gone = new Set(left);
  const rows: number[] = [];
  let row = 0;
  for (const s of members) {
    if (!gone.has(s)) for (let r = 0; r < s.rows; r++) rows.push(row + r);
    row += s.rows;
  }
  return { members: members.filter((s) => !gone.has(s)), rows };
}

/**
 * Steps every live member, `step(s, base)` with `base` its first row, which returns (as
 * ActiveRequest.step) the row each next row continues, or undefined when its rows go on in place.
 * Returns the source row of each row of the next batch, or undefined when every row goes on in place.
 */
export function stepMembers(members: readonly ActiveRequest[], step: (s: ActiveRequest, base: number) => readonly number[] | undefined): number[] | undefined {
  const sources: number[] = [];
  let moved = false;
  let row = 0;
  for (const s of members) {
    const base = row;
    const rows = s.rows;
    const next = s.cancelled || s.finished ? undefined : step(s, base);
    if (next === undefined) for (let r = 0; r < rows; r++) sources.push(base + r);
    else {
      moved ||= next.length !== rows || next.some((parent, r) => parent !== r);
      for (const parent of next) sources.push(base + parent);
    }
    row += rows;
  }
  return moved ? sources : undefined;
}
