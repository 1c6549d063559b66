/**
 * Bad words: a phrase's last id is banned when the output so far ends with the phrase's other ids
 * (a one-id phrase is always banned), so no phrase is ever completed.
 */
import type { LogitsProcessor } from './processor.ts';

/** The processor for phrases of token ids (already validated); undefined for none. */
export function badWords(phrases: readonly (readonly number[])[]): LogitsProcessor | undefined {
  if (phrases.length === 0) return undefined;
  return (logits, state) => {
    const out = Float32Array.from(logits);
    for (const id of bannedIds(phrases, state.outputIds)) out[id] = -Infinity;
    return out;
  };
}

/** The ids the phrases ban after `output`: each phrase's last id, when the output ends with the rest. */
export function bannedIds(phrases: readonly (readonly number[])[], output: readonly number[]): number[] {
  const banned: number[] = [];
  for (const phrase of phrases) {
    const prefix = phrase.length - 1;
    if (prefix > output.length) continue;
    let matches = true;
    for (let i = 0; i < prefix && matches; i++) matches = output[output.length - prefix + i] === phrase[i];
    if (matches) banned.push(phrase[prefix]!);
  }
  return banned;
}
