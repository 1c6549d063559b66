/**
 * The checkpoint a build source holds, by what the source is: a Hugging Face directory (safetensors or
 * pytorch_model.bin), a Megatron-LM checkpoint directory, a NeMo model (`.nemo` or unpacked), a
 * PyTorch state dict file (`.pt`, `.pth`, `.bin`, `.ckpt`, config.json beside it) or a llama2.c file.
 */
import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { Checkpoint, readConfig, readHfCheckpoint } from './checkpoint.ts';
import { readLlama2cCheckpoint } from './llama2c-checkpoint.ts';
import { isMegatronDir, readMegatronCheckpoint } from './torch/megatron.ts';
import { readNemoCheckpoint } from './torch/nemo.ts';
import { readStateDict } from './torch/state-dict.ts';
import { isTorchFileStart } from './torch/torch-file.ts';

/** The kinds of build source. */
export type CheckpointKind = 'hf' | 'megatron' | 'nemo' | 'torch-file' | 'llama2c';

/** What `source` (an existing file or directory) holds. */
export function checkpointKind(source: string): CheckpointKind {
  if (statSync(source).isDirectory()) {
    if (existsSync(join(source, 'model_config.yaml'))) return 'nemo';
    if (isMegatronDir(source) && !hasHfWeights(source)) return 'megatron';
    return 'hf';
  }
  if (source.endsWith('.nemo')) return 'nemo';
  return /\.(pt|pth|bin|ckpt)$/.test(source) && writtenByTorch(source) ? 'torch-file' : 'llama2c';
}

/** Reads the checkpoint `source` holds. */
export function readCheckpoint(source: string, kind: CheckpointKind = checkpointKind(source)): Checkpoint {
  switch (kind) {
    case 'megatron':
      return readMegatronCheckpoint(source);
    case 'nemo':
      return readNemoCheckpoint(source);
    case 'torch-file':
      if (!existsSync(join(dirname(source), 'config.json'))) {
        throw new ChorusError('CHORUS_FILE_MISSING', `${source} is a PyTorch state dict, which holds no model config: put the model's config.json beside it (in ${dirname(source)})`, { param: 'config.json' });
      }
      return new Checkpoint(source, readConfig(dirname(source)), readStateDict(source));
    case 'llama2c':
      return readLlama2cCheckpoint(source);
    case 'hf':
      return readHfCheckpoint(source);
  }
}

function hasHfWeights(dir: string): boolean {
  return ['model.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin', 'pytorch_model.bin.index.json'].some((name) => existsSync(join(dir, name)));
}

/** True when the file starts as torch.save writes: a zip archive, or the pickled magic number of the format before 1.6. */
function writtenByTorch(file: string): boolean {
  const head = Buffer.alloc(4);
  const fd = openSync(file, 'r');
  try {
    readSync(fd, head, 0, 4, 0);
  } finally {
    closeSync(fd);
  }
  return isTorchFileStart(head);
}
