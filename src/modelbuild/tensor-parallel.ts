/**
 * Megatron-style tensor parallelism: a decoder's weights split over N ranks, each rank's slot and paged
 * decoders the same graph with its own weights. q heads split in N parts (KV heads too when they
 * divide, else each rank keeps the one its q heads share); q/k/v and the MLP's up and gate by columns,
 * attention out and MLP down by rows (their biases whole, added once after the all-reduce); norms and
 * learned positions whole; embeddings and the LM head by vocabulary (padded with zero rows to a
 * multiple of N). Every block is lazy (tensor-slice.ts): a rank's weights are read when its data file
 * is written.
 */
import { ChorusError, invalidArgument } from '../errors.ts';
import type { DecoderLayerWeights, DecoderSpec, DecoderWeights, Linear } from './decoder-spec.ts';
import { columns, rowsOf, type Span } from './tensor-slice.ts';

/** What each rank's graph needs to know of the split. */
export interface TensorParallelGraph {
  /** N, the number of ranks (the collectives' `world_size`). */
  worldSize: number;
  /** The model's vocabulary; the gathered logits are sliced back to it. */
  vocabSize: number;
  /** The first vocabulary row of this rank's embedding and head shard (a weight of the rank's graph). */
  vocabStart: number;
  /** Rows of each rank's shard: the vocabulary padded to a multiple of N, over N. */
  vocabRows: number;
}

/** One rank's share: its spec (heads per rank), its weights, and its graph's split. */
export interface RankShare {
  spec: DecoderSpec;
  weights: DecoderWeights;
  tp: TensorParallelGraph;
}

/** The MLP's inner width (the up projection's outputs). */
function intermediateOf(weights: DecoderWeights): number {
  return weights.layers[0]!.up.weight.dims[1]!;
}

/** KV heads each rank keeps: a share when they divide by N, else the one its q heads share. */
function kvHeadsPerRank(spec: DecoderSpec, n: number): number {
  const { numHeads, numKvHeads } = spec;
  if (numKvHeads % n === 0) return numKvHeads / n;
  const group = numHeads / numKvHeads;
  if (group % (numHeads / n) === 0) return 1;
  throw new ChorusError(
    'CHORUS_UNSUPPORTED',
    `tensor_parallel ${n} does not split num_key_value_heads ${numKvHeads}: each rank's ${numHeads / n} query heads must share whole key/value heads (num_key_value_heads a multiple of ${n}, or ${numHeads / n} query heads dividing the ${group} of each group)`,
    { param: 'tensor_parallel', value: n },
  );
}

/** Refuses by name a split the model's shape does not allow. */
export function checkTensorParallel(spec: DecoderSpec, weights: DecoderWeights, n: number): void {
  if (!Number.isInteger(n) || n < 1) throw invalidArgument('tensor_parallel', 'an integer >= 1', n);
  if (spec.numHeads % n !== 0) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `tensor_parallel ${n} must divide num_heads ${spec.numHeads}`, { param: 'tensor_parallel', value: n });
  }
  const intermediate = intermediateOf(weights);
  if (intermediate % n !== 0) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `tensor_parallel ${n} must divide the intermediate size ${intermediate}`, { param: 'tensor_parallel', value: n });
  }
  kvHeadsPerRank(spec, n);
}

/** Columns `span` of a linear layer (its bias too): a column-parallel share. */
function columnShare(w: Linear, span: Span): Linear {
  return { weight: columns(w.weight, span), bias: w.bias === undefined ? undefined : columns(w.bias, span) };
}

/** Rows `span` of a linear layer, its bias whole (added once after the all-reduce): a row-parallel share. */
function rowShare(w: Linear, span: Span): Linear {
  return { weight: rowsOf(w.weight, span), bias: w.bias };
}

/** Rank `rank`'s vocabulary rows of a [vocab, hidden] table, padded with zero rows to the shard's size. */
function vocabShare(table: DecoderWeights['embedTokens'], tp: TensorParallelGraph): DecoderWeights['embedTokens'] {
  const count = Math.max(0, Math.min(tp.vocabRows, tp.vocabSize - tp.vocabStart));
  if (count === 0) return zeroRows(table, tp.vocabRows);
  return rowsOf(table, { start: tp.vocabStart, count }, tp.vocabRows - count);
}

/** A shard of zeros only (a rank past the vocabulary's end, when it is smaller than N). */
function zeroRows(table: DecoderWeights['embedTokens'], rows: number): DecoderWeights['embedTokens'] {
  return { dims: [rows, table.dims[1]!], data: new Float32Array(rows * table.dims[1]!) };
}

/** Rank `rank` of `n`'s spec and weights. */
export function rankShare(spec: DecoderSpec, weights: DecoderWeights, n: number, rank: number): RankShare {
  const { numHeads, numKvHeads, headDim, vocabSize } = spec;
  const heads = numHeads / n;
  const kvHeads = kvHeadsPerRank(spec, n);
  // The KV heads of this rank's q heads: its share, or the one head its q heads' group reads.
  const firstKv = numKvHeads % n === 0 ? rank * kvHeads : Math.floor((rank * heads) / (numHeads / numKvHeads));
  const qSpan = { start: rank * heads * headDim, count: heads * headDim };
  const kvSpan = { start: firstKv * headDim, count: kvHeads * headDim };
  const inner = intermediateOf(weights) / n;
  const innerSpan = { start: rank * inner, count: inner };
  const layers = weights.layers.map(
    (layer): DecoderLayerWeights => ({
      ...layer,
      q: columnShare(layer.q, qSpan),
      k: columnShare(layer.k, kvSpan),
      v: columnShare(layer.v, kvSpan),
      o: rowShare(layer.o, qSpan),
      up: columnShare(layer.up, innerSpan),
      ...(layer.gate === undefined ? {} : { gate: columnShare(layer.gate, innerSpan) }),
      down: rowShare(layer.down, innerSpan),
    }),
  );
  const vocabRows = Math.ceil(vocabSize / n);
  const tp: TensorParallelGraph = { worldSize: n, vocabSize, vocabStart: rank * vocabRows, vocabRows };
  const embedTokens = vocabShare(weights.embedTokens, tp);
  return {
    spec: { ...spec, numHeads: heads, numKvHeads: kvHeads },
    weights: {
      embedTokens,
      ...(weights.embedPositions === undefined ? {} : { embedPositions: weights.embedPositions }),
      layers,
      finalNorm: weights.finalNorm,
      ...(weights.lmHead === undefined ? {} : { lmHead: vocabShare(weights.lmHead, tp) }),
    },
    tp,
  };
}
