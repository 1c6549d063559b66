/** What an architecture file declares. */
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
