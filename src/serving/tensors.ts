/**
 * Tensors as protocol servers build them from requests: checked against their datatype and shape, or
 * from a JSON value for a named input.
 */
import { DATATYPES } from '../config/index.ts';
import { tensor, tensorFromValue, wideElement, type Tensor } from '../ensemble/index.ts';
import type { TensorInfo } from './engine-client.ts';

export { DATATYPES, tensor, wideElement };

/** A JSON value (an element, or nested lists of them) as a tensor of `input`, the batch dimension added when left out. */
export function tensorFromJson(name: string, value: unknown, input: TensorInfo): Tensor {
  return tensorFromValue(name, value, { datatype: input.datatype, dims: input.shape.slice(1) });
}
