/**
 * Megatron-LM GPT checkpoints as Megatron saves them: `<dir>/latest_checkpointed_iteration.txt` naming
 * `release` or an iteration, `<dir>/release/` or `<dir>/iter_0000100/` holding `mp_rank_00/`,
 * `mp_rank_01/`, ... (one per tensor-parallel rank), each with `model_optim_rng.pt`: a dict whose
 * `model.language_model` holds `embedding` and `transformer` (`encoder` from checkpoint_version 3),
 * with `checkpoint_version` and Megatron's command line as `args`. The shape comes from `args`; a
 * checkpoint without them (the GPT 345M release) needs a config.json beside it giving n_head.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError, describe } from '../../errors.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint.ts';
import { fileRanges } from '../file-range.ts';
import type { Tensor } from '../tensor.ts';
import { mergeMegatronGpt, type MegatronRank } from './megatron-gpt.ts';
import { TorchTensor } from './storage-tensor.ts';
import { readTorchFile } from './torch-file.ts';
import { Namespace } from './torch-globals.ts';

const RANK_FILES = ['model_optim_rng.pt', 'model_rng.pt'];

/** True when `dir` looks like a Megatron-LM checkpoint directory. */
export function isMegatronDir(dir: string): boolean {
  return existsSync(join(dir, 'latest_checkpointed_iteration.txt')) || existsSync(join(dir, 'mp_rank_00')) || existsSync(join(dir, 'release', 'mp_rank_00'));
}

/** Reads a Megatron-LM GPT checkpoint, its ranks merged, as a GPT-2 checkpoint. */
export function readMegatronCheckpoint(dir: string): Checkpoint {
  const root = checkpointRoot(dir);
  const names = readdirSync(root);
  const pipeline = names.find((name) => /^mp_rank_\d{2}_\d{3}$/.test(name));
  if (pipeline !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', `${root} is split over pipeline-parallel stages (${pipeline}); only tensor-parallel ranks (mp_rank_XX) are merged`);
  const rankDirs = names.filter((name) => /^mp_rank_\d{2}$/.test(name)).sort();
  if (names.some((name) => name.endsWith('.distcp'))) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${root} is in Megatron's distributed checkpoint format (torch_dist, *.distcp files), which is not read; convert it to the torch format (mp_rank_XX/model_optim_rng.pt) with Megatron-LM's checkpoint converter`);
  }
  if (rankDirs.length === 0) throw new ChorusError('CHORUS_FILE_MISSING', `${root} has no mp_rank_00 directory`);
  rankDirs.forEach((name, r) => {
    if (name !== `mp_rank_${String(r).padStart(2, '0')}`) throw new ChorusError('CHORUS_FILE_MISSING', `${root}: rank ${r} is missing (found ${rankDirs.join(', ')})`);
  });
  const states = rankDirs.map((name) => {
    const file = RANK_FILES.map((f) => join(root, name, f)).find((f) => existsSync(f));
    if (file === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `${join(root, name)} has no ${RANK_FILES.join(' or ')}`);
    return { file, state: asDict(readTorchFile(fileRanges(file), file), file, 'the checkpoint') };
  });
  const { file: file0, state: state0 } = states[0]!;
  const version = Number(state0.get('checkpoint_version') ?? 0);
  const args = state0.get('args');
  const ranks = states.map(({ file, state }) => megatronRank(file, state));
  const fileConfig: ModelConfig = existsSync(join(dir, 'config.json')) ? (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as ModelConfig) : {};
  const shapeFrom = args instanceof Namespace ? fromArgs(args, file0, ranks.length) : fromConfig(fileConfig, dir, ranks);
  const vocabSize = typeof fileConfig.vocab_size === 'number' ? fileConfig.vocab_size : undefined;
  return mergeMegatronGpt(dir, ranks, { ...shapeFrom, checkpointVersion: version, ...(vocabSize === undefined ? {} : { vocabSize }) }, fileConfig);
}

/** The directory holding the mp_rank_XX directories. */
function checkpointRoot(dir: string): string {
  const latest = join(dir, 'latest_checkpointed_iteration.txt');
  if (existsSync(latest)) {
    const tag = readFileSync(latest, 'utf8').trim();
    const root = tag === 'release' ? join(dir, 'release') : /^\d+$/.test(tag) ? join(dir, `iter_${tag.padStart(7, '0')}`) : undefined;
    if (root === undefined || !existsSync(root)) throw new ChorusError('CHORUS_FILE_MISSING', `${latest} names ${describe(tag)}, but ${root ?? 'no such directory'} does not exist`);
    return root;
  }
  return existsSync(join(dir, 'release', 'mp_rank_00')) ? join(dir, 'release') : dir;
}

/** A rank's embedding and transformer tensors. */
function megatronRank(file: string, state: Map<unknown, unknown>): MegatronRank {
  const model = asDict(state.get('model'), file, 'model');
  if (!model.has('language_model')) throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: model has ${[...model.keys()].map(String).join(', ')}, not language_model; only Megatron-LM's GPT model is read (Megatron Core's layout is not)`);
  const lm = asDict(model.get('language_model'), file, 'model.language_model');
  const embedding = asDict(lm.get('embedding'), file, 'model.language_model.embedding');
  const transformerKey = lm.has('encoder') ? 'encoder' : 'transformer';
  const transformer = asDict(lm.get(transformerKey), file, `model.language_model.${transformerKey}`);
  for (const key of embedding.keys()) {
    if (!['word_embeddings', 'position_embeddings', 'word_embeddings.weight', 'position_embeddings.weight'].includes(String(key))) {
      throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: model.language_model.embedding.${String(key)} is not read; only word and position embeddings are`, { param: String(key) });
    }
  }
  for (const extra of lm.keys()) {
    if (extra !== 'embedding' && extra !== transformerKey) throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: model.language_model.${String(extra)} is not read (an untied output layer or a pooler); only a GPT with its head tied to the embeddings is`);
  }
  return {
    source: file,
    wordEmbeddings: embeddingTensor(embedding, 'word_embeddings', file),
    positionEmbeddings: embeddingTensor(embedding, 'position_embeddings', file),
    transformer: tensorsOf(transformer, file),
  };
}

function embeddingTensor(embedding: Map<unknown, unknown>, name: string, file: string): Tensor {
  const nested = embedding.get(name);
  const tensor = nested instanceof Map ? nested.get('weight') : embedding.get(`${name}.weight`);
  if (!(tensor instanceof TorchTensor)) throw new ChorusError('CHORUS_FILE_INVALID', `${file}: model.language_model.embedding has no ${name}.weight tensor`);
  return tensor;
}

function tensorsOf(dict: Map<unknown, unknown>, file: string): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  for (const [key, value] of dict) {
    if (!(value instanceof TorchTensor)) throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: ${String(key)} is not a tensor`);
    tensors.set(String(key), value);
  }
  return tensors;
}

/** The shape from Megatron's args, refusing the options a GPT-2 layout cannot express. */
function fromArgs(args: Namespace, file: string, ranks: number): Omit<Parameters<typeof mergeMegatronGpt>[2], 'checkpointVersion'> {
  const a = args.attributes;
  const refuse = (name: string, supported: string): never => {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: args.${name} ${describe(a.get(name))} is not supported; the Megatron GPT read here has ${supported}`, { param: `args.${name}`, value: a.get(name) });
  };
  const flags: Array<[string, unknown, string]> = [
    ['swiglu', false, 'a GELU MLP'],
    ['untie_embeddings_and_output_weights', false, 'its head tied to the embeddings'],
    ['group_query_attention', false, 'multi-head attention'],
    ['add_bias_linear', true, 'biases'],
    ['apply_residual_connection_post_layernorm', false, 'pre-LayerNorm residuals'],
  ];
  for (const [name, expected, supported] of flags) if (a.has(name) && a.get(name) !== expected) refuse(name, supported);
  if (a.has('normalization') && a.get('normalization') !== 'LayerNorm') refuse('normalization', 'LayerNorm');
  if (a.has('position_embedding_type') && a.get('position_embedding_type') !== 'learned_absolute') refuse('position_embedding_type', 'learned absolute positions');
  if (Number(a.get('pipeline_model_parallel_size') ?? 1) !== 1) refuse('pipeline_model_parallel_size', 'no pipeline-parallel split');
  if ((a.get('num_experts') ?? null) !== null) refuse('num_experts', 'a dense MLP');
  const int = (name: string, fallback?: number): number => {
    const value = a.get(name) ?? fallback;
    if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) throw new ChorusError('CHORUS_FILE_INVALID', `${file}: args.${name} must be a positive integer, got ${describe(value)}`, { param: `args.${name}` });
    return value;
  };
  const hiddenSize = int('hidden_size');
  const numHeads = int('num_attention_heads');
  if (int('kv_channels', hiddenSize / numHeads) * numHeads !== hiddenSize) refuse('kv_channels', 'heads of hidden_size / num_attention_heads');
  // Megatron-LM before its pipeline parallelism called the tensor-parallel size model_parallel_size.
  const tp = int(a.has('tensor_model_parallel_size') ? 'tensor_model_parallel_size' : 'model_parallel_size', ranks);
  if (tp !== ranks) throw new ChorusError('CHORUS_FILE_MISSING', `${file}: args.tensor_model_parallel_size is ${tp}, but ${ranks} mp_rank directories were found`);
  const eps = a.get('layernorm_epsilon');
  return { numLayers: int('num_layers'), hiddenSize, numHeads, ffnHiddenSize: int('ffn_hidden_size', 4 * hiddenSize), layerNormEps: typeof eps === 'number' ? eps : 1e-5 };
}

/** The shape from a config.json beside the checkpoint (its heads) and the tensors (the rest). */
function fromConfig(config: ModelConfig, dir: string, ranks: readonly MegatronRank[]): Omit<Parameters<typeof mergeMegatronGpt>[2], 'checkpointVersion'> {
  const heads = config.n_head ?? config.num_attention_heads;
  if (typeof heads !== 'number') {
    throw new ChorusError('CHORUS_FILE_MISSING', `${dir}: the checkpoint has no args, so the number of heads must come from a config.json beside it ({"n_head": N})`, { param: 'n_head' });
  }
  const rank0 = ranks[0]!;
  const layers = new Set([...rank0.transformer.keys()].map((name) => /^layers\.(\d+)\./.exec(name)?.[1]).filter((n) => n !== undefined));
  const ffnLocal = rank0.transformer.get('layers.0.mlp.dense_h_to_4h.weight')?.dims[0] ?? 0;
  const eps = config.layer_norm_epsilon;
  return { numLayers: layers.size, hiddenSize: rank0.positionEmbeddings.dims[1] ?? 0, numHeads: heads, ffnHiddenSize: ffnLocal * ranks.length, layerNormEps: typeof eps === 'number' ? eps : 1e-5 };
}

/** `value` as a dict, or a clear error naming what was expected. */
export function asDict(value: unknown, file: string, what: string): Map<unknown, unknown> {
  if (value instanceof Map) return value;
  throw new ChorusError('CHORUS_FILE_INVALID', `${file}: ${what} is not a dict (got ${value === undefined ? 'nothing' : value === null ? 'None' : typeof value}); not a Megatron-LM GPT checkpoint`);
}
