/** Temperature: logits divided by t > 0 (t = 0 is greedy, which the sampler handles without this). */
import { invalidArgument } from '../../../errors.ts';
import type { LogitsProcessor } from './processor.ts';

/** The processor; undefined for 1, and for 0 (greedy). */
export function temperature(t: number): LogitsProcessor | undefined {
  if (!(Number.isFinite(t) && t >= 0)) throw invalidArgument('temperature', 'a number in [0, inf)', t);
  if (t === 1 || t === 0) return undefined;
  return (logits) => logits.map((value) => value / t);
}
