/**
 * encode: input_ids [batch, L] and input_lengths -> last_hidden_state [batch, L, d_model] (padding
 * masked) and, when a row asks with is_return_attentions (FT's T5 encoder input), attentions
 * [batch, layers, heads, L, L] from a model built to offer them (`output_attentions: true`).
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
  const asked = inputs.is_return_attentions === undefined ? false : perRow<boolean>(inputs.is_return_attentions, batch, 'is_return_attentions').some(Boolean);
  const encoded = await model.encode({ ids: rows<number>(ids), lengths });
  const out: TensorRecord = {
    last_hidden_state: { datatype: 'FP32', shape: [...encoded.dims], data: Array.from(encoded.hidden) },
  };
  if (!asked) return out;
  if (encoded.attentions.length === 0) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `model ${model.name} was not built to return attentions; set output_attentions: true in its definition to offer them`, { param: 'is_return_attentions' });
  }
  const [, heads, w] = encoded.attentions[0]!.dims;
  const data: number[] = [];
  const per = heads * w * w;
  for (let b = 0; b < batch; b++) for (const layer of encoded.attentions) data.push(...layer.data.subarray(b * per, (b + 1) * per));
  out.attentions = { datatype: 'FP32', shape: [batch, encoded.attentions.length, heads, w, w], data };
  return out;
});
