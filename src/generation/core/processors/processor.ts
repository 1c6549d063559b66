/** The shape every logits processor has. */
import type { SequenceState } from '../sequence-state.ts';

/** A pure step of logits processing: returns new logits, leaves its input untouched. */
export type LogitsProcessor = (logits: Float32Array, state: SequenceState) => Float32Array;
