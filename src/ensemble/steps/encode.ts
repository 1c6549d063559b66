/**
 * encode: input_ids [batch, L] and input_lengths -> last_hidden_state [batch, L, d_model] (padding rows
 * masked) and, for a model built with --output-attentions, attentions [batch, layers, heads, L, L].
 */
import { ChorusError } from '../../errors.ts';
import { perRow, rows } from '../tensor.ts';
import { onFinalInputs, type TensorRecord } from './step.ts';

export const encodeStep = onFinalInputs(async (inputs, context) => {
  const model = await context.store.model(context.target);
  if (model.engine !== 'encode') throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has engine ${model.engine}; encode steps need engine encode`);
  const ids = inputs.input_ids!;
  const batch = ids.shape[0] ?? 0;
  const width = ids.shape[1] ?? 0;
  const lengths = perRow<number>(inputs.input_lengths!, batch, 'input_lengths');
  const masks = lengths.map((length) => Array.from({ length: width }, (_, i) => (i < length ? 1 : 0)));
  const encoded = await model.encoder.encode(rows<number>(ids), masks);
  const out: TensorRecord = {
    last_hidden_state: { datatype: 'FP32', shape: [...encoded.hidden.dims], data: Array.from(encoded.hidden.data as Float32Array) },
  };
  if (encoded.attentions.length > 0) {
    const [, heads] = encoded.attentions[0]!.dims;
    const data: number[] = [];
    const per = heads! * width * width;
    for (let b = 0; b < batch; b++) for (const layer of encoded.attentions) data.push(...(layer.data as Float32Array).subarray(b * per, (b + 1) * per));
    out.attentions = { datatype: 'FP32', shape: [batch, encoded.attentions.length, heads!, width, width], data };
  }
  return out;
});
