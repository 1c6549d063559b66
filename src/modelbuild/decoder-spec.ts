/** What an architecture file hands the shared decoder builder: the shape of the model and its weights. */
import type { QuantizedLinear } from './quant/nbits.ts';
import type { Tensor } from './tensor.ts';

/** The hyper-parameters of a decoder-only transformer. */
export interface DecoderSpec {
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  /** Key/value heads; fewer than `numHeads` is grouped-query attention. */
  numKvHeads: number;
  headDim: number;
  norm: 'layernorm' | 'rmsnorm';
  normEps: number;
  /**
   * `gelu_new`: up -> tanh-approximated GELU -> down (GPT-2); `silu_gated`: down(silu(gate) * up) (Llama);
   * `gelu_tanh_gated`: down(gelu_tanh(gate) * up) (Gemma 2's GeGLU).
   */
  mlp: 'gelu_new' | 'silu_gated' | 'gelu_tanh_gated';
  /** Learned position embeddings (GPT-2) or rotary embeddings over the whole head (Llama). */
  positions: { kind: 'learned' } | { kind: 'rotary'; theta: number; scaling?: RopeScaling };
  /** Longest sequence the model was trained for. */
  maxPositions: number;
  /**
   * Sliding-window attention (Hugging Face's `sliding_window`): a query at position i attends the keys
   * j with i - j < size. `layers[i]` false makes layer i global; absent, every layer is windowed.
   */
  slidingWindow?: { size: number; layers?: readonly boolean[] } | undefined;
  /** Attention logit soft-capping: scores become softcap * tanh(scores / softcap) before the mask. */
  attnSoftcap?: number | undefined;
  /** Final logit soft-capping, the same on the head's output. */
  finalSoftcap?: number | undefined;
  /** The attention's scale on q.k; default 1 / sqrt(headDim). */
  attnScale?: number | undefined;
  /** A factor on the token embeddings (Gemma: sqrt(hidden), rounded to the float type). */
  embedScale?: number | undefined;
  /** Per-head RMSNorm of q and k before the rotary embedding (Qwen3): layers carry `qNorm` and `kNorm`. */
  qkNorm?: boolean;
}

/**
 * Llama 3's rotary frequency scaling (`rope_type` llama3): low frequencies divided by `factor`, high ones
 * kept, those between interpolated, by wavelength against `originalMaxPositions`.
 */
export interface RopeScaling {
  type: 'llama3';
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositions: number;
}

/** A linear layer in MatMul layout: `weight` is [in, out]. */
export interface Linear {
  weight: Tensor;
  bias?: Tensor | undefined;
  /** The weight quantized (MatMulNBits layout); the graphs then use it instead of `weight`. */
  quantized?: QuantizedLinear | undefined;
}

/** A norm's scale, and its shift for LayerNorm. */
export interface Norm {
  weight: Tensor;
  bias?: Tensor | undefined;
}

/** One transformer block. `gate` is present for gated MLPs. */
export interface DecoderLayerWeights {
  inputNorm: Norm;
  q: Linear;
  k: Linear;
  v: Linear;
  o: Linear;
  /** [headDim] scales of the per-head q and k norms, with `qkNorm`. */
  qNorm?: Norm | undefined;
  kNorm?: Norm | undefined;
  postNorm: Norm;
  /** A norm of the attention's output before it joins the residual stream (Gemma 2). */
  postAttnNorm?: Norm | undefined;
  /** A norm of the MLP's output before it joins the residual stream (Gemma 2). */
  postMlpNorm?: Norm | undefined;
  up: Linear;
  gate?: Linear | undefined;
  down: Linear;
}

/** Every weight of a decoder. */
export interface DecoderWeights {
  /** [vocab, hidden] */
  embedTokens: Tensor;
  /** [maxPositions, hidden], for learned positions. */
  embedPositions?: Tensor | undefined;
  layers: DecoderLayerWeights[];
  finalNorm: Norm;
  /** [vocab, hidden]; absent when the head is tied to `embedTokens`. */
  lmHead?: Tensor | undefined;
  /** The head (or the tied embeddings as the head) quantized; the embeddings' lookup stays float. */
  lmHeadQuantized?: QuantizedLinear | undefined;
}
