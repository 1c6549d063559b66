/**
 * A build's `weights`: as the checkpoint has them (float, or a GPTQ / AWQ checkpoint's 4-bit packing),
 * or quantized by the builder to int8 or int4. The checkpoint is opened through here so a prequantized
 * one shows the architectures float-shaped projections, and the decoder's weights come back with each
 * projection's quantized form attached.
 */
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import type { DecoderWeights, Linear } from '../decoder-spec.ts';
import { hubQuantization, prequantizedCheckpoint, prequantizedOf, type HubQuantization } from './hub.ts';
import type { WeightsMode } from './nbits.ts';
import { checkGroupSize, quantizeDecoderWeights, type QuantSummary } from './rtn.ts';

/** The build options about weights. */
export interface WeightsOptions {
  /** `checkpoint` (the default): as the checkpoint stores them; `int8` / `int4`: quantized by the builder. */
  weights?: WeightsMode;
  /** int4: values per scale (16, 32, 64, 128 or 256). Default 128. */
  groupSize?: number;
  /** int8 / int4: also quantize the LM head. Default: true for int8, false for int4. */
  quantizeHead?: boolean;
}

const MODES: readonly WeightsMode[] = ['checkpoint', 'int8', 'int4'];

/** A checkpoint opened for a build's weights: a prequantized one shows its projections as float-shaped tensors. */
export interface OpenedWeights {
  checkpoint: Checkpoint;
  hub?: { quantization: HubQuantization; projections: number };
}

/** Checks the options against the checkpoint and opens it (a GPTQ / AWQ checkpoint is repacked as it is written). */
export function openWeights(checkpoint: Checkpoint, options: WeightsOptions): OpenedWeights {
  const mode = options.weights ?? 'checkpoint';
  if (!MODES.includes(mode)) throw invalidArgument('weights', MODES.join(', '), mode);
  if (options.groupSize !== undefined) {
    checkGroupSize(options.groupSize);
    if (mode !== 'int4') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `groupSize applies to weights int4, not ${mode}`, { param: 'groupSize' });
  }
  const quantization = hubQuantization(checkpoint.config);
  if (quantization === undefined) return { checkpoint };
  if (mode === 'int8') throw new ChorusError('CHORUS_UNSUPPORTED', `weights int8 quantizes float checkpoints; ${checkpoint.source} is ${quantization.method} 4-bit already: build it with weights checkpoint (or int4)`, { param: 'weights' });
  if (options.groupSize !== undefined && options.groupSize !== quantization.groupSize) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `groupSize ${options.groupSize}: ${checkpoint.source} is ${quantization.method} with group_size ${quantization.groupSize}, which a build keeps`, { param: 'groupSize' });
  }
  const opened = prequantizedCheckpoint(checkpoint, quantization);
  return { checkpoint: opened.checkpoint, hub: { quantization, projections: opened.projections } };
}

/** The decoder's weights with their quantized forms, and what was quantized (undefined: float weights). */
export function decoderWeightsFor(opened: OpenedWeights, weights: DecoderWeights, options: WeightsOptions): { weights: DecoderWeights; summary?: QuantSummary } {
  const mode = options.weights ?? 'checkpoint';
  if (opened.hub !== undefined) return linkPrequantized(weights, opened.hub.quantization, opened.hub.projections);
  if (mode === 'checkpoint') return { weights };
  return quantizeDecoderWeights(weights, { weights: mode, ...(options.groupSize === undefined ? {} : { groupSize: options.groupSize }), ...(options.quantizeHead === undefined ? {} : { head: options.quantizeHead }) });
}

function linkPrequantized(weights: DecoderWeights, q: HubQuantization, expected: number): { weights: DecoderWeights; summary: QuantSummary } {
  let linked = 0;
  const link = (w: Linear): Linear => {
    const quantized = prequantizedOf(w.weight);
    if (quantized === undefined) return w;
    linked++;
    return { ...w, quantized };
  };
  const layers = weights.layers.map((layer) => ({
    ...layer,
    q: link(layer.q),
    k: link(layer.k),
    v: link(layer.v),
    o: link(layer.o),
    up: link(layer.up),
    down: link(layer.down),
    ...(layer.gate === undefined ? {} : { gate: link(layer.gate) }),
  }));
  if (linked !== expected) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `the checkpoint has ${expected} ${q.method} projections, of which the architecture takes ${linked} as whole projections; ${q.method} checkpoints of this model type are not supported`);
  }
  return { weights: { ...weights, layers }, summary: { weights: q.method, bits: 4, groupSize: q.groupSize === -1 ? 'channel' : q.groupSize, projections: linked, head: false, embeddings: false } };
}

/** The build summary's line about weights: what was quantized, and what stayed float. */
export function quantSummaryText(summary: QuantSummary, floatName: string): string {
  const how = summary.weights === 'int8' ? 'int8, per output channel' : `${summary.weights === 'int4' ? 'int4' : `${summary.weights} 4-bit`}, ${summary.groupSize === 'channel' ? 'per output channel' : `groups of ${summary.groupSize}`}`;
  const kept = summary.head ? 'embeddings' : 'embeddings and LM head';
  return `${summary.projections} projections${summary.head ? ' and the LM head' : ''} quantized (${how}); ${kept} in ${floatName}`;
}
