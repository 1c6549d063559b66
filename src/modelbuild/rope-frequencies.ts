/**
 * The rotary embedding's inverse frequencies, in float32 step by step as transformers computes them
 * (its rope initialisation functions run in float32 tensors, each Python scalar taken as float32).
 */
import type { DecoderSpec } from './decoder-spec.ts';

const f = Math.fround;

/** `headDim / 2` inverse frequencies, `1 / theta^(2i / headDim)`, with the spec's scaling applied. */
export function inverseFrequencies(spec: DecoderSpec): number[] {
  const headDim = spec.headDim;
  const rotary = spec.positions.kind === 'rotary' ? spec.positions : { theta: 10000, scaling: undefined };
  const base = Array.from({ length: headDim / 2 }, (_, i) => f(1 / f(Math.pow(rotary.theta, f((2 * i) / headDim)))));
  const scaling = rotary.scaling;
  if (scaling === undefined) return base;
  // Llama 3: wavelengths longer than the original context / low_freq_factor are slowed down by
  // `factor`, those shorter than the context / high_freq_factor are kept, and those between blend.
  const factor = f(scaling.factor);
  const context = f(scaling.originalMaxPositions);
  const lowWavelength = f(scaling.originalMaxPositions / scaling.lowFreqFactor);
  const highWavelength = f(scaling.originalMaxPositions / scaling.highFreqFactor);
  const low = f(scaling.lowFreqFactor);
  const span = f(scaling.highFreqFactor - scaling.lowFreqFactor);
  return base.map((inv) => {
    const wavelength = f(f(2 * Math.PI) / inv);
    const scaled = wavelength > lowWavelength ? f(inv / factor) : inv;
    if (wavelength < highWavelength || wavelength > lowWavelength) return scaled;
    const smooth = f(f(f(context / wavelength) - low) / span);
    return f(f(f(f(1 - smooth) * scaled) / factor) + f(smooth * scaled));
  });
}
