/** What an architecture file declares. */
import type { Checkpoint, ModelConfig } from '../checkpoint.ts';
import type { DecoderSpec, DecoderWeights } from '../decoder-spec.ts';

/** One architecture: the config's `model_type`s it builds, its shape, and where its weights are. */
export interface Architecture {
  modelTypes: readonly string[];
  /** The decoder's hyper-parameters, read from config.json. */
  spec(config: ModelConfig): DecoderSpec;
  /** Every weight, taken from the checkpoint by name and shape. */
  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights;
}
