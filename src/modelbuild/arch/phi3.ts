/**
 * Phi-3 and Phi-3.5-mini: a Llama-style decoder whose q, k and v are one `qkv_proj` and whose gate and
 * up projections are one `gate_up_proj` (gate first), each split here into the builder's separate
 * projections (lazily: the rows are read when the graph writes them). Plain rotary embeddings (the 4k
 * variants); the 128k variants' `longrope` scaling is refused by name. `sliding_window` (2047 in
 * Phi-3-mini-4k) limits how far back each query attends.
 */
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint.ts';
import { positiveInt } from '../config-fields.ts';
import type { DecoderSpec, DecoderWeights, Linear } from '../decoder-spec.ts';
import type { FloatType } from '../float-bits.ts';
import { transpose2d, type Tensor } from '../tensor.ts';
import type { DecoderArchitecture } from './architecture.ts';
import { llamaSpec, withLlamaEnds } from './llama.ts';

/** Rows [start, start + count) of a 2-D tensor, read from its source only when asked for. */
function rows(tensor: Tensor, start: number, count: number): Tensor {
  const cols = tensor.dims[1]!;
  const offset = start * cols;
  const read = (from: number, length: number): Float32Array =>
    tensor.read === undefined ? tensor.data.slice(offset + from, offset + from + length) : tensor.read(offset + from, length);
  const readEncoded = tensor.readEncoded;
  return {
    dims: [count, cols],
    ...(tensor.dtype === undefined ? {} : { dtype: tensor.dtype }),
    get data() {
      return read(0, count * cols);
    },
    read,
    ...(readEncoded === undefined ? {} : { readEncoded: (from: number, length: number, type: FloatType) => readEncoded(offset + from, length, type) }),
  };
}

/** HF `sliding_window` as the spec's window, when the config sets one. */
function slidingWindow(config: ModelConfig): DecoderSpec['slidingWindow'] {
  const size = config.sliding_window;
  if (size === undefined || size === null) return undefined;
  return { size: positiveInt(config, 'sliding_window') };
}

export const phi3: DecoderArchitecture = {
  kind: 'decoder',
  modelTypes: ['phi3'],

  spec(config) {
    if (config.attention_bias === true) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: attention_bias ${describe(config.attention_bias)} is not supported for phi3; expected false`, { param: 'attention_bias' });
    }
    const window = slidingWindow(config);
    return { ...llamaSpec(config), ...(window === undefined ? {} : { slidingWindow: window }) };
  },

  weights(checkpoint: Checkpoint, spec: DecoderSpec): DecoderWeights {
    const { hiddenSize: d, numHeads, numKvHeads, headDim } = spec;
    const intermediate = positiveInt(checkpoint.config, 'intermediate_size');
    const matmul = (weight: Tensor): Linear => ({ weight: transpose2d(weight) });
    const layers = Array.from({ length: spec.numLayers }, (_, i) => {
      const p = `model.layers.${i}`;
      const qkv = checkpoint.take(`${p}.self_attn.qkv_proj.weight`, [(numHeads + 2 * numKvHeads) * headDim, d]);
      const gateUp = checkpoint.take(`${p}.mlp.gate_up_proj.weight`, [2 * intermediate, d]);
      return {
        inputNorm: { weight: checkpoint.take(`${p}.input_layernorm.weight`, [d]) },
        q: matmul(rows(qkv, 0, numHeads * headDim)),
        k: matmul(rows(qkv, numHeads * headDim, numKvHeads * headDim)),
        v: matmul(rows(qkv, (numHeads + numKvHeads) * headDim, numKvHeads * headDim)),
        o: matmul(checkpoint.take(`${p}.self_attn.o_proj.weight`, [d, numHeads * headDim])),
        postNorm: { weight: checkpoint.take(`${p}.post_attention_layernorm.weight`, [d]) },
        gate: matmul(rows(gateUp, 0, intermediate)),
        up: matmul(rows(gateUp, intermediate, intermediate)),
        down: matmul(checkpoint.take(`${p}.mlp.down_proj.weight`, [d, intermediate])),
      };
    });
    return withLlamaEnds(checkpoint, spec, layers);
  },
};
