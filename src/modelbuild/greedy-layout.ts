/** What the builder and the runtimes agree on for the extra decoder models (`chorus build --greedy-search`, `--slot-decoder`). */

/** Its file in the model directory's onnx/. */
export const GREEDY_MODEL = 'decoder_model_greedy.onnx';

/**
 * The id it pads prompts and finished rows with. ONNX Runtime counts positions by skipping tokens
 * equal to the pad id, so it must be an id no prompt holds: -1, which Gather reads as the last
 * embedding row (of a position that is masked out).
 */
export const GREEDY_PAD_ID = -1;

/** The slot decoder's file in onnx/ (`chorus build --slot-decoder`): the native engine's model. */
export const SLOT_DECODER_MODEL = 'decoder_model_slots.onnx';

/** An encoder-decoder's encoder for the native engine, which writes the cross-attention keys and values (`--slot-decoder`). */
export const SLOT_ENCODER_MODEL = 'encoder_model_slots.onnx';
