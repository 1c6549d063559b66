/**
 * The rotary embedding's parameters from config.json: `rope_theta` and `rope_scaling` (transformers 4),
 * or `rope_parameters` (transformers 5: `{ rope_type, rope_theta, ... }`). Plain rotary embeddings and
 * Llama 3's frequency scaling are built; any other scaling type is refused by name.
 */
import { ChorusError, describe } from '../../errors.ts';
import type { ModelConfig } from '../checkpoint.ts';
import { positiveInt, positiveNumber } from '../config-fields.ts';
import type { DecoderSpec } from '../decoder-spec.ts';

/** The `rope_type`s the builder computes. */
export const ROPE_TYPES = ['default', 'llama3'] as const;

/** The rotary positions of `config`: its base and, for Llama 3.1 and later, its frequency scaling. */
export function rotaryPositions(config: ModelConfig): DecoderSpec['positions'] {
  let theta: number | undefined;
  let scaling: Extract<DecoderSpec['positions'], { kind: 'rotary' }>['scaling'];
  for (const key of ['rope_parameters', 'rope_scaling']) {
    const value = config[key];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'object' || Array.isArray(value)) {
      throw new ChorusError('CHORUS_FILE_INVALID', `config.json: ${key} must be an object, got ${describe(value)}`, { param: key, value });
    }
    const params = value as Record<string, unknown>;
    const type = params.rope_type ?? params.type ?? 'default';
    if (!(ROPE_TYPES as readonly unknown[]).includes(type)) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: ${key} of type ${describe(type)} is not supported; supported: ${ROPE_TYPES.join(', ')}`, { param: `${key}.rope_type`, value: type });
    }
    // Read under their full names, so that a message says `rope_scaling.factor`.
    const field = (name: string, read: typeof positiveNumber = positiveNumber): number => read({ [`${key}.${name}`]: params[name] }, `${key}.${name}`);
    if (params.rope_theta !== undefined) theta ??= field('rope_theta');
    if (type === 'llama3') {
      const highFreqFactor = field('high_freq_factor');
      const lowFreqFactor = field('low_freq_factor');
      if (!(highFreqFactor > lowFreqFactor)) {
        throw new ChorusError('CHORUS_FILE_INVALID', `config.json: ${key}.high_freq_factor must be greater than low_freq_factor ${lowFreqFactor}, got ${highFreqFactor}`, { param: `${key}.high_freq_factor` });
      }
      scaling ??= {
        type: 'llama3',
        factor: field('factor'),
        lowFreqFactor,
        highFreqFactor,
        originalMaxPositions: field('original_max_position_embeddings', positiveInt),
      };
    }
  }
  theta ??= positiveNumber(config, 'rope_theta', 10000);
  return { kind: 'rotary', theta, ...(scaling === undefined ? {} : { scaling }) };
}

/**
 * Refuses a partial rotary embedding (`partial_rotary_factor` below 1, at the top of config.json or, in
 * transformers 5, in `rope_parameters`): the builder rotates whole heads.
 */
export function wholeHeadRotary(config: ModelConfig): void {
  const params = config.rope_parameters;
  const nested = typeof params === 'object' && params !== null ? (params as Record<string, unknown>).partial_rotary_factor : undefined;
  for (const [param, factor] of [['partial_rotary_factor', config.partial_rotary_factor], ['rope_parameters.partial_rotary_factor', nested]] as const) {
    if (factor !== undefined && factor !== null && factor !== 1) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: ${param} ${describe(factor)} is not supported; only 1 (rotary embeddings over the whole head)`, { param, value: factor });
    }
  }
}
