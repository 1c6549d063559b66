/**
 * Mistral: Llama's layers and weights, with sliding-window attention (`sliding_window`, 4096 in v0.1;
 * null in later versions: global attention). The caches keep every position; only the mask changes.
 */
import { llama } from './llama.ts';
import { slidingWindow } from './sliding-window.ts';
import type { DecoderArchitecture } from './architecture.ts';

export const mistral: DecoderArchitecture = {
  kind: 'decoder',
  modelTypes: ['mistral'],

  spec(config) {
    const spec = llama.spec(config);
    const window = slidingWindow(config, spec.numLayers);
    return window === undefined ? spec : { ...spec, slidingWindow: window };
  },

  weights: (checkpoint, spec) => llama.weights(checkpoint, spec),
};
