/** What logits processors may read about one sequence: its prompt, its output so far, and counts. */

/** The read-only view of a sequence at one decode step. */
export interface SequenceState {
  promptIds: readonly number[];
  outputIds: readonly number[];
  /** How many times each id occurs in `outputIds`. */
  outputCounts: ReadonlyMap<number, number>;
  /** The nucleus threshold for this step (factual-nucleus sampling changes it between steps). */
  topP: number;
}

/** A state for tests and for the first step of a sequence. */
export function sequenceState(promptIds: readonly number[], outputIds: readonly number[] = [], topP = 1): SequenceState {
  const outputCounts = new Map<number, number>();
  for (const id of outputIds) outputCounts.set(id, (outputCounts.get(id) ?? 0) + 1);
  return { promptIds, outputIds, outputCounts, topP };
}
