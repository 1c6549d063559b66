/**
 * forward: any ONNX model (Triton's onnxruntime backend). The step's input ports are the model's input
 * names, its output ports the model's output names; tensors keep their datatypes. Requests go through
 * the model's dynamic batcher.
 */
import { ChorusError } from '../../errors.ts';
import { onFinalInputs, type TensorRecord } from './step.ts';

export const forwardStep = onFinalInputs(async (inputs, context) => {
  const model = await context.store.model(context.target);
  if (model.engine !== 'forward') throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has engine ${model.engine}; forward steps need engine forward`);
  const out = await model.run(inputs);
  const result: TensorRecord = {};
  for (const port of Object.keys(context.step.outputs)) {
    const value = out[port];
    if (value === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has no output ${port}; it has: ${Object.keys(out).join(', ')}`, { param: port });
    result[port] = value;
  }
  return result;
});
