/**
 * State dicts in torch.save files: `pytorch_model.bin` (one file, or shards listed in
 * pytorch_model.bin.index.json) and `.pt` / `.pth` / `.ckpt` files. A file holds a dict of tensors by
 * name, or a dict with one such dict under `state_dict`, `model`, `module` or `model_state_dict` (as
 * training scripts save them, beside an epoch or optimizer state, which is not read).
 */
import { ChorusError } from '../../errors.ts';
import { fileRanges } from '../file-range.ts';
import type { Tensor } from '../tensor.ts';
import { TorchTensor } from './storage-tensor.ts';
import { readTorchFile } from './torch-file.ts';

/** Keys under which training scripts nest the state dict. */
const NESTED = ['state_dict', 'model', 'module', 'model_state_dict'];

/** The tensors of the state dict in `file`, by name (lazy). */
export function readStateDict(file: string): Map<string, Tensor> {
  return stateDictOf(readTorchFile(fileRanges(file), file), file);
}

/** The state dict in a value read from a torch.save file. */
export function stateDictOf(value: unknown, source: string): Map<string, Tensor> {
  if (isTensorDict(value)) return value;
  if (value instanceof Map) {
    const nested = NESTED.find((key) => isTensorDict(value.get(key)));
    if (nested !== undefined) return value.get(nested) as Map<string, Tensor>;
    const keys = [...value.keys()].slice(0, 8).map(String);
    throw new ChorusError('CHORUS_FILE_INVALID', `${source} holds no state dict: its dict has ${keys.join(', ')}${value.size > 8 ? ', ...' : ''}; expected tensors by name, or one of ${NESTED.join(', ')} holding them`);
  }
  throw new ChorusError('CHORUS_FILE_INVALID', `${source} holds no state dict: it holds ${kindOf(value)}; expected a dict of tensors by name`);
}

/** True for a non-empty dict whose keys are strings and whose values are all tensors. */
function isTensorDict(value: unknown): value is Map<string, Tensor> {
  if (!(value instanceof Map) || value.size === 0) return false;
  for (const [key, tensor] of value) if (typeof key !== 'string' || !(tensor instanceof TorchTensor)) return false;
  return true;
}

function kindOf(value: unknown): string {
  if (value instanceof TorchTensor) return 'one tensor';
  if (Array.isArray(value)) return `a list of ${value.length}`;
  return value === null ? 'None' : typeof value;
}
