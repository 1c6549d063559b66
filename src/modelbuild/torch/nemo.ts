/**
 * NeMo Megatron GPT models: a `.nemo` archive (a tar, gzip-compressed by older NeMo) or the directory
 * it unpacks to, holding `model_config.yaml` and `model_weights.ckpt` (tensor parallel 1) or
 * `mp_rank_XX/model_weights.ckpt` (one per rank). The weights are a flat state dict of Megatron-LM's
 * GPT (`model.language_model.embedding.word_embeddings.weight`, `model.language_model.encoder.layers.N...`)
 * with query_key_value in checkpoint_version 3's order, merged as Megatron-LM checkpoints are.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint } from '../checkpoint.ts';
import { fileRanges, type FileRanges } from '../file-range.ts';
import type { Tensor } from '../tensor.ts';
import { mergeMegatronGpt, type MegatronRank } from './megatron-gpt.ts';
import { nemoT5Checkpoint } from './nemo-t5.ts';
import { stateDictOf } from './state-dict.ts';
import { readTarEntries } from './tar.ts';
import { readTorchFile } from './torch-file.ts';

/**
 * Reads a NeMo model (`.nemo` file or unpacked directory): a GPT, its ranks merged, as a GPT-2
 * checkpoint; a T5 or UL2 (MegatronT5Model) as a T5 checkpoint (nemo-t5.ts).
 */
export function readNemoCheckpoint(source: string): Checkpoint {
  const { files, config } = openNemo(source);
  if (isT5(config)) {
    return nemoT5Checkpoint(source, config, () => {
      const weights = files.get('model_weights.ckpt');
      if (weights === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `${source} has no model_weights.ckpt`);
      const label = `${source}:model_weights.ckpt`;
      return stateDictOf(readTorchFile(weights, label), label);
    });
  }
  checkConfig(config, source);
  const tp = Number(config.tensor_model_parallel_size ?? 1);
  const weightFiles = tp === 1 ? ['model_weights.ckpt'] : Array.from({ length: tp }, (_, r) => `mp_rank_${String(r).padStart(2, '0')}/model_weights.ckpt`);
  const ranks = weightFiles.map((name): MegatronRank => {
    const bytes = files.get(name);
    if (bytes === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `${source} has no ${name} (tensor_model_parallel_size is ${tp})`);
    const label = `${source}:${name}`;
    return nemoRank(stateDictOf(readTorchFile(bytes, label), label), label);
  });
  const int = (key: string, fallback?: number): number => {
    const value = config[key] ?? fallback;
    if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: model_config.yaml ${key} must be a positive integer, got ${describe(value)}`, { param: key });
    return value;
  };
  const hiddenSize = int('hidden_size');
  const eps = config.layernorm_epsilon;
  return mergeMegatronGpt(source, ranks, {
    numLayers: int('num_layers'),
    hiddenSize,
    numHeads: int('num_attention_heads'),
    ffnHiddenSize: int('ffn_hidden_size', 4 * hiddenSize),
    layerNormEps: typeof eps === 'number' ? eps : 1e-5,
    checkpointVersion: 3,
  });
}

/** Whether the NeMo model at `source` is a T5 or UL2 (an encoder-decoder), reading its model_config.yaml alone. */
export function isNemoT5(source: string): boolean {
  return isT5(openNemo(source).config);
}

/** A NeMo model's files (as byte ranges) and its parsed model_config.yaml. */
function openNemo(source: string): { files: Map<string, FileRanges>; config: Record<string, unknown> } {
  const files = source.endsWith('.nemo') ? readTarEntries(fileRanges(source), source) : directoryFiles(source);
  const configBytes = files.get('model_config.yaml');
  if (configBytes === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `${source} has no model_config.yaml`);
  try {
    return { files, config: parse(Buffer.from(configBytes.read(0, configBytes.size)).toString('utf8')) as Record<string, unknown> };
  } catch (cause) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source}: model_config.yaml is not YAML (${(cause as Error).message})`, { cause });
  }
}

/** The files of an unpacked .nemo directory that are read. */
function directoryFiles(dir: string): Map<string, FileRanges> {
  const files = new Map<string, FileRanges>();
  const add = (name: string): void => {
    if (existsSync(join(dir, name))) files.set(name, fileRanges(join(dir, name)));
  };
  add('model_config.yaml');
  add('model_weights.ckpt');
  for (let r = 0; existsSync(join(dir, `mp_rank_${String(r).padStart(2, '0')}`)); r++) add(`mp_rank_${String(r).padStart(2, '0')}/model_weights.ckpt`);
  return files;
}

/** Whether the model is NeMo's T5 (MegatronT5Model, which UL2 is too). */
function isT5(config: Record<string, unknown>): boolean {
  return /megatron_t5_model\.MegatronT5Model$|^MegatronT5Model$/.test(String(config.target ?? ''));
}

/** Refuses the NeMo GPT options a GPT-2 layout cannot express, naming them. */
function checkConfig(config: Record<string, unknown>, source: string): void {
  const target = String(config.target ?? '');
  if (target !== '' && !/MegatronGPTModel/.test(target)) throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: ${target} is not supported; NeMo GPT (MegatronGPTModel) and T5 (MegatronT5Model) models are`, { param: 'target', value: target });
  const expect = (key: string, allowed: readonly unknown[], what: string): void => {
    const value = config[key];
    if (value !== undefined && value !== null && !allowed.includes(value)) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: model_config.yaml ${key} ${describe(value)} is not supported; the NeMo GPT read here has ${what}`, { param: key, value });
    }
  };
  expect('mcore_gpt', [false], 'the Megatron-LM layout (not Megatron Core\'s)');
  expect('pipeline_model_parallel_size', [1], 'no pipeline-parallel split');
  expect('normalization', ['layernorm'], 'LayerNorm');
  expect('bias', [true], 'biases');
  expect('activation', ['gelu'], 'a GELU MLP');
  expect('position_embedding_type', ['learned_absolute'], 'learned absolute positions');
  expect('share_embeddings_and_output_weights', [true], 'its head tied to the embeddings');
  expect('transformer_block_type', ['pre_ln'], 'pre-LayerNorm blocks');
  expect('num_query_groups', [config.num_attention_heads], 'multi-head attention');
  expect('kv_channels', [Number(config.hidden_size) / Number(config.num_attention_heads)], 'heads of hidden_size / num_attention_heads');
}

/** One rank's flat state dict as Megatron-LM's embedding and transformer tensors. */
function nemoRank(sd: Map<string, Tensor>, source: string): MegatronRank {
  // megatron_amp_O2 wraps the model once more: its names start with model.module.
  const prefix = [...sd.keys()].some((k) => k.startsWith('model.module.')) ? 'model.module.language_model.' : 'model.language_model.';
  const get = (name: string): Tensor => {
    const tensor = sd.get(prefix + name);
    if (tensor === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: tensor ${prefix}${name} is missing`, { param: prefix + name });
    return tensor;
  };
  const transformer = new Map<string, Tensor>();
  for (const [name, tensor] of sd) {
    if (name === `${prefix}embedding.word_embeddings.weight` || name === `${prefix}embedding.position_embeddings.weight`) continue;
    if (!name.startsWith(`${prefix}encoder.`)) throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: tensor ${name} is not read (an untied output layer or another module); only a GPT with its head tied to the embeddings is`, { param: name });
    transformer.set(name.slice(`${prefix}encoder.`.length), tensor);
  }
  return { source, wordEmbeddings: get('embedding.word_embeddings.weight'), positionEmbeddings: get('embedding.position_embeddings.weight'), transformer };
}
