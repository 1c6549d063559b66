/**
 * encode: input_ids [batch, L] and input_lengths -> last_hidden_state [batch, L, d_model] (padding
 * masked) and, for a model built with --output-attentions, attentions [batch, layers, heads, L, L].
 * Requests go through the model's dynamic batcher, so concurrent requests share encoder runs.
 */
import { ChorusError } from '../../errors.ts';
import { perRow, rows } from '../tensor.ts';
import { onFinalInputs, type TensorRecord } from './step.ts';

export const encodeStep = onFinalInputs(async (inputs, context) => {
  const model = await context.store.model(context.target);
  if (model.engine !== 'encode') throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has engine ${model.engine}; encode steps need engine encode`);
  const ids = inputs.input_ids!;
  const batch = ids.shape[0] ?? 0;
  const lengths = perRow<number>(inputs.input_lengths!, batch, 'input_lengths');
  const encoded = await model.encode({ ids: rows<number>(ids), lengths });
  const out: TensorRecord = {
    last_hidden_state: { datatype: 'FP32', shape: [...encoded.dims], data: Array.from(encoded.hidden) },
  };
  if (encoded.attentions.length > 0) {
    const [, heads, w] = encoded.attentions[0]!.dims;
    const data: number[] = [];
    const per = heads * w * w;
    for (let b = 0; b < batch; b++) for (const layer of encoded.attentions) data.push(...layer.data.subarray(b * per, (b + 1) * per));
    out.attentions = { datatype: 'FP32', shape: [batch, encoded.attentions.length, heads, w, w], data };
  }
  return out;
});
