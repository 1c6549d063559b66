/** Reads a config's sliding-window attention: `sliding_window`, and which layers it applies to. */
import { ChorusError, describe } from '../../errors.ts';
import type { ModelConfig } from '../checkpoint.ts';
import { positiveInt } from '../config-fields.ts';
import type { DecoderSpec } from '../decoder-spec.ts';

const LAYER_TYPES = ['sliding_attention', 'full_attention'];

/**
 * The window of `config`, or undefined for global attention (`sliding_window` absent or null). Which
 * layers are windowed: config `layer_types` when present, else `pattern` (every layer when none).
 */
export function slidingWindow(config: ModelConfig, numLayers: number, pattern?: (layer: number) => boolean): DecoderSpec['slidingWindow'] {
  if (config.sliding_window === undefined || config.sliding_window === null) return undefined;
  const size = positiveInt(config, 'sliding_window');
  const types = config.layer_types;
  let layers: boolean[] | undefined;
  if (types !== undefined && types !== null) {
    if (!Array.isArray(types) || types.length !== numLayers || types.some((t) => !LAYER_TYPES.includes(String(t)))) {
      throw new ChorusError('CHORUS_FILE_INVALID', `config.json: layer_types must list ${numLayers} entries, each "sliding_attention" or "full_attention", got ${describe(types)}`, {
        param: 'layer_types',
      });
    }
    layers = types.map((t) => t === 'sliding_attention');
  } else if (pattern !== undefined) {
    layers = Array.from({ length: numLayers }, (_, i) => pattern(i));
  }
  if (layers?.every((l) => !l)) return undefined;
  return layers === undefined || layers.every((l) => l) ? { size } : { size, layers };
}
