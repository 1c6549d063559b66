/**
 * The nodes a tensor-parallel rank's decoder adds to the single-device one: the collectives (domain
 * `chorus`, one input and one output, attribute `world_size`; the runtime tells each kernel its rank
 * and communicator), the vocabulary-split embedding lookup and the gathered logits.
 */
import type { Linear } from './decoder-spec.ts';
import type { GraphBuilder } from './graph.ts';
import { addonLinear, linearWeights, matMul, type Projected } from './layers.ts';
import type { TensorParallelGraph } from './tensor-parallel.ts';

/** `y` = the sum over the ranks of `x`, on every rank. */
export function allReduce(g: GraphBuilder, tp: TensorParallelGraph, x: string): string {
  return g.op('AllReduce', [x], { world_size: tp.worldSize }, { domain: 'chorus', name: 'all_reduce' });
}

/** The ranks' `x` [..., n] concatenated along the last axis in rank order: [..., n * world_size]. */
export function allGather(g: GraphBuilder, tp: TensorParallelGraph, x: string): string {
  return g.op('AllGather', [x], { world_size: tp.worldSize }, { domain: 'chorus', name: 'all_gather' });
}

/**
 * The embeddings of `ids` from this rank's vocabulary shard `table`, summed over the ranks: each rank
 * looks up the ids its shard holds (the first row of the shard for the others, then zeroed), and the
 * all-reduce adds the one rank's row to the others' zeros, exactly. The shard's first row is the
 * rank's weight `tensor_parallel.vocab_start`, so every rank's graph is the same.
 */
export function vocabParallelEmbedding(g: GraphBuilder, tp: TensorParallelGraph, table: string, ids: string): string {
  const start = g.weightOf('tensor_parallel.vocab_start', 'int64', [tp.vocabStart], []);
  const local = g.op('Sub', [ids, start]);
  const zero = g.int64([0], []);
  const inShard = g.op('And', [g.op('GreaterOrEqual', [local, zero]), g.op('Less', [local, g.int64([tp.vocabRows], [])])]);
  const rows = g.op('Gather', [table, g.op('Where', [inShard, local, zero])], { axis: 0 }, { name: 'embed' });
  const masked = g.op('Where', [g.op('Unsqueeze', [inShard, g.int64([-1])]), rows, g.floatConstant([0], [])]);
  return allReduce(g, tp, masked);
}

/**
 * A row-parallel projection (attention out, MLP down): this rank's rows of the weight times its share
 * of `x`, summed over the ranks; the bias, whole on every rank, is left to the operator after the sum.
 */
export function rowParallel(g: GraphBuilder, tp: TensorParallelGraph, w: Linear, x: string, name: string): Projected {
  const { weight, bias } = linearWeights(g, w, name);
  const partial = g.addonLinear ? addonLinear(g, x, weight, undefined) : matMul(g, x, weight);
  return { value: allReduce(g, tp, partial), ...(bias === undefined ? {} : { bias }) };
}

/** This rank's logits [batch, 1, shard] gathered over the ranks and cut back to the model's vocabulary. */
export function gatheredLogits(g: GraphBuilder, tp: TensorParallelGraph, logits: string): string {
  const all = allGather(g, tp, logits);
  if (tp.vocabRows * tp.worldSize === tp.vocabSize) return all;
  return g.op('Slice', [all, g.int64([0]), g.int64([tp.vocabSize]), g.int64([-1])], {}, { name: 'vocab' });
}
