/** What the builder and the runtime agree on for the GreedySearch model (`chorus build --greedy-search`). */

/** Its file in the model directory's onnx/. */
export const GREEDY_MODEL = 'decoder_model_greedy.onnx';

/**
 * The id it pads prompts and finished rows with. ONNX Runtime counts positions by skipping tokens
 * equal to the pad id, so it must be an id no prompt holds: -1, which Gather reads as the last
 * embedding row (of a position that is masked out).
 */
export const GREEDY_PAD_ID = -1;
