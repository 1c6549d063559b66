/** Top-k: every logit below the k-th largest becomes -inf (ties with the k-th are kept, as transformers does). */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor; undefined for 0 (off) or k at least the vocabulary size. */
export function topK(k: number, vocabSize: number): LogitsProcessor | undefined {
  if (!Number.isInteger(k) || k < 0) throw invalidArgument('runtime_top_k', `an integer in [0, ${vocabSize}]`, k);
  if (k === 0 || k >= vocabSize) return undefined;
  return (logits) => {
    const threshold = Float32Array.from(logits).sort().reverse()[k - 1]!;
    return logits.map((value) => (value < threshold ? -Infinity : value));
  };
}
