/** What an encoder-decoder architecture file hands the shared builder. */
import type { Linear, Norm } from './decoder-spec.ts';
import type { Tensor } from './tensor.ts';

/** The hyper-parameters of an encoder-decoder transformer (T5 and BART families). */
export interface Seq2SeqSpec {
  vocabSize: number;
  dModel: number;
  numHeads: number;
  /** Per-head size; T5's d_kv need not be dModel / numHeads. */
  headDim: number;
  encoderLayers: number;
  decoderLayers: number;
  norm: 'layernorm' | 'rmsnorm';
  normEps: number;
  /** Norm before each sublayer (T5, mBART), or after the residual add (BART). */
  preNorm: boolean;
  /** `relu` (T5 v1.0), `gated_gelu_new` (T5 v1.1, flan-T5, mT5), `gated_silu` (UL2), `gelu` (BART, the exact erf form). */
  ffn: 'relu' | 'gated_gelu_new' | 'gated_silu' | 'gelu';
  /** T5's bucketed relative position bias, or learned absolute positions read at position + offset (BART: 2). */
  positions: { kind: 'relative'; numBuckets: number; maxDistance: number } | { kind: 'learned'; offset: number };
  /** Multiplies attention scores: 1 for T5, headDim^-0.5 for BART. */
  attentionScale: number;
  /** Multiplies token embeddings: sqrt(dModel) with BART's scale_embedding, else 1. */
  embedScale: number;
  /** A norm right after the embeddings (BART's layernorm_embedding). */
  embeddingNorm: boolean;
  /** A norm after each stack (T5, mBART). */
  finalNorm: boolean;
  /** Multiplies the decoder output before a tied head: dModel^-0.5 for T5, else 1. */
  headScale: number;
}

/** q, k, v and output projections. */
export interface AttentionWeights {
  q: Linear;
  k: Linear;
  v: Linear;
  o: Linear;
}

/** The feed-forward block; `gate` for gated activations. */
export interface FeedForwardWeights {
  up: Linear;
  gate?: Linear | undefined;
  down: Linear;
}

export interface EncoderLayer {
  selfNorm: Norm;
  self: AttentionWeights;
  ffnNorm: Norm;
  ffn: FeedForwardWeights;
}

export interface DecoderLayer extends EncoderLayer {
  crossNorm: Norm;
  cross: AttentionWeights;
}

/** One stack's own weights. */
export interface StackWeights<L> {
  layers: L[];
  /** [maxPositions + offset, dModel], learned positions. */
  positions?: Tensor | undefined;
  /** [numBuckets, numHeads], relative positions. */
  relativeBias?: Tensor | undefined;
  embeddingNorm?: Norm | undefined;
  finalNorm?: Norm | undefined;
}

export interface Seq2SeqWeights {
  /** [vocab, dModel], shared by both stacks. */
  shared: Tensor;
  encoder: StackWeights<EncoderLayer>;
  decoder: StackWeights<DecoderLayer>;
  /** [vocab, dModel]; absent when tied to `shared`. */
  lmHead?: Tensor | undefined;
  /** [vocab], added to the logits (BART's final_logits_bias). */
  logitsBias?: Tensor | undefined;
}
