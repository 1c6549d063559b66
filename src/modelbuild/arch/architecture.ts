/**
 * What an architecture file declares. `checkpoint.take()` hands out lazy tensors: their values are read
 * from the file each time `data` is asked for, so an architecture keeps them lazy (transpose2d, or a
 * `data` getter of its own for other rearrangements) and never holds a model's weights itself.
 */
import type { Checkpoint, ModelConfig } from '../checkpoint.ts';
import type { DecoderSpec, DecoderWeights } from '../decoder-spec.ts';
import type { Seq2SeqSpec, Seq2SeqWeights } from '../seq2seq-spec.ts';

/** A decoder-only architecture: the config's `model_type`s it builds, its shape, where its weights are. */
export interface DecoderArchitecture {
  kind: 'decoder';
  modelTypes: readonly string[];
  /** The decoder's hyper-parameters, read from config.json. */
  spec(config: ModelConfig): DecoderSpec;
  /** Every weight, taken from the checkpoint by name and shape. */
  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights;
}

/** An encoder-decoder architecture. */
export interface Seq2SeqArchitecture {
  kind: 'seq2seq';
  modelTypes: readonly string[];
  spec(config: ModelConfig): Seq2SeqSpec;
  /** With `encoderOnly`, the decoder's weights are not taken (and are skipped if present). */
  weights(checkpoint: Checkpoint, spec: Seq2SeqSpec, options: { encoderOnly: boolean }): Seq2SeqWeights;
}

export type Architecture = DecoderArchitecture | Seq2SeqArchitecture;
