/**
 * `chorus build`: a checkpoint in, a model directory in the Optimum / transformers.js layout out:
 * config.json, generation_config.json, the tokenizer files, onnx/decoder_model_merged.onnx (and
 * onnx/encoder_model.onnx for encoder-decoders; `<file>_data` beside a file whose weights are large),
 * and chorus_build.json saying how it was built. The checkpoint is read a tensor at a time and each
 * weight is written to its data file as it is produced, so the build's memory is about its largest
 * weight's, whatever the model's size.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { basename, dirname, join } from 'node:path';
import { ChorusError, invalidArgument } from '../errors.ts';
import { endIdsOf, readGenerationConfig } from '../util/end-ids.ts';
import { architectureFor } from './arch/index.ts';
import type { Checkpoint } from './checkpoint.ts';
import { buildDecoderGraph, buildGreedySearchGraph, buildPagedDecoderGraph, buildSlotDecoderGraph, PAGED_DECODER_MODEL, SLOT_DECODER_ATTENTIONS, type SlotDecoderAttention } from './decoder-graph.ts';
import { ExternalDataFile } from './external-data.ts';
import { FLOAT_WIDTH, type FloatType } from './float-bits.ts';
import { GREEDY_MODEL, SLOT_DECODER_MODEL, SLOT_ENCODER_MODEL } from './greedy-layout.ts';
import type { DecoderSpec, DecoderWeights } from './decoder-spec.ts';
import type { GraphBuilder } from './graph.ts';
import { buildEncoderGraph, buildSeq2SeqDecoderGraph, buildSeq2SeqSlotDecoderGraph, buildSeq2SeqSlotEncoderGraph, type EncoderAttention } from './seq2seq-graph.ts';
import type { SlotLinear } from './layers.ts';
import type { Seq2SeqSpec } from './seq2seq-spec.ts';
import { checkpointKind, readCheckpoint } from './read-checkpoint.ts';
import { decoderWeightsFor, openWeights, type WeightsOptions } from './quant/build-weights.ts';
import type { QuantSummary } from './quant/rtn.ts';
import { checkTensorParallel, rankShare, type RankShare } from './tensor-parallel.ts';

/** Options of `buildModel`. */
export interface BuildOptions extends WeightsOptions {
  /** A Hugging Face checkpoint directory, or a llama2.c `.bin` file. */
  source: string;
  /** The output directory (created). */
  out: string;
  /**
   * Weights and activations. `bf16` (the type Llama 3, Qwen and Gemma are trained in) writes bfloat16
   * weights and graph inputs and outputs where `fp16` writes float16; ONNX Runtime runs such graphs on
   * GPUs only (the native engine). A bf16 checkpoint built in bf16 keeps its bits. Default: fp32.
   */
  dtype?: BuildDtype;
  /** `portable`: standard ONNX operators, any execution provider; `cuda`: ONNX Runtime's fused contrib operators. Default: portable. */
  flavor?: 'portable' | 'cuda';
  /** `generate` (the default): the decoder (and encoder); `encode`: the encoder alone, hidden states out. */
  task?: 'generate' | 'encode';
  /** Encoders: also output each layer's attention probabilities, `attentions.{i}`. Default: false. */
  outputAttentions?: boolean;
  /**
   * Decoder-only models: also write onnx/decoder_model_greedy.onnx, ONNX Runtime's GreedySearch
   * operator around the decoder, which runs a whole greedy decode in one session run (the weights are
   * then kept in onnx/decoder_model_merged.onnx_data, which both models read). Default: false.
   */
  greedySearch?: boolean;
  /**
   * Also write onnx/decoder_model_slots.onnx, the decoder the native engine runs, whose cache is a
   * preallocated buffer of slots on the device updated in place: for decoder-only models (cuda flavor)
   * through GroupQueryAttention, weights shared with the decoder as for greedySearch, and beside it
   * onnx/decoder_model_paged.onnx, the same over a paged cache (the addon's PagedAttention); for
   * encoder-decoders (either flavor) through the addon's SlotAttention, with
   * onnx/encoder_model_slots.onnx, which writes the cross-attention keys and values. Default: false.
   */
  slotDecoder?: boolean;
  /**
   * The attention of a decoder-only slot decoder: the native addon's (`addon`, the default), ONNX
   * Runtime's GroupQueryAttention (kept to compare with), or `PagedAttention`. The addon's is
   * DecoderSlotAttention without rotary embeddings, and for Qwen3 in fp16 and bf16 PagedAttention over
   * the slots (its q and k norms, the rotation and the new keys inside); other rotary models keep
   * GroupQueryAttention, the faster with many rows. `PagedAttention` takes every fp16 or bf16 rotary
   * model through PagedAttention over the slots: the faster for one or a few streams (its decode
   * kernel), the slower for many. fp32 rotary models (which the CPU runs) keep GroupQueryAttention.
   */
  slotAttention?: SlotDecoderAttention;
  /**
   * The slot models' projections: the native addon's Linear (bias and activation inside it, a kernel of
   * its own for decode steps of up to 4 rows) or MatMul. Default: Linear in fp16, MatMul in fp32 (which
   * also runs on the CPU, where ONNX Runtime's MatMul is the faster).
   */
  slotLinear?: SlotLinear;
  /**
   * The slot encoder's self-attention: ONNX Runtime's fused MultiHeadAttention (the default for fp16
   * models without T5's relative position bias, which it cannot take) or MatMul and Softmax.
   */
  encoderAttention?: EncoderAttention;
  /** llama2.c sources: the tokenizer.bin. Default: tokenizer.bin, else the one tok*.bin, beside the model. */
  tokenizer?: string;
  /**
   * Decoder-only models with the slot decoder: split over this many ranks (Megatron-style, see
   * tensor-parallel.ts), each rank's slot and paged decoders written to onnx/tp{N}/rank{r}/ with their
   * own data file, in place of the single-device decoders. Default: 1.
   */
  tensorParallel?: number;
  /** Called as the build moves through its stages. */
  onProgress?: (stage: BuildStage, index: number, total: number) => void;
  /** Called after each weight is written, with the bytes of weights written so far and in all (about: a few small ones are computed). */
  onWeights?: (done: number, total: number) => void;
}

/** The dtypes a build writes, and their ONNX element types. */
export type BuildDtype = 'fp32' | 'fp16' | 'bf16';
const FLOAT_TYPES: Record<BuildDtype, FloatType> = { fp32: 'float32', fp16: 'float16', bf16: 'bfloat16' };

export const BUILD_STAGES = ['read checkpoint', 'map weights', 'build graph', 'serialize', 'write files'] as const;
export type BuildStage = (typeof BUILD_STAGES)[number];

/** What `buildModel` wrote. */
export interface BuildResult {
  out: string;
  spec: DecoderSpec | Seq2SeqSpec;
  files: string[];
  stats: BuildStats;
  /** What was quantized; absent for float weights. */
  quantization?: QuantSummary;
}

/** How the build went: its time and memory. */
export interface BuildStats {
  seconds: number;
  /** Bytes of weights written, in the build's float type. */
  weightBytes: number;
  /** The process's peak resident memory when the build ended (process.resourceUsage().maxRSS). */
  peakRssBytes: number;
}

/** The file Chorus writes beside the model to record how it was built. */
export interface BuildInfo {
  builder: 'chorus';
  architecture: string;
  dtype: BuildDtype;
  flavor: 'portable' | 'cuda';
  task: 'generate' | 'encode';
  spec: DecoderSpec | Seq2SeqSpec;
  /** The ids generation ends at (generation_config.json's eos_token_id, else config.json's); empty: none. */
  endIds?: number[];
  /** onnx/decoder_model_greedy.onnx was written, stopping at this end id (-1: none, or several). */
  greedySearch?: { eosTokenId: number };
  /** onnx/decoder_model_slots.onnx was written. */
  slotDecoder?: boolean;
  /** The decoders were split over this many ranks, in onnx/tp{N}/rank{r}/ (absent: 1). */
  tensor_parallel?: number;
  /** The projections' weights are quantized (MatMulNBits layout); `dtype` is the activations' and scales' type. */
  weights?: QuantSummary;
  stats?: BuildStats;
}

/** Models whose weights come to more than this keep them in external data files. */
const EMBEDDED_LIMIT = 1024 ** 3;

const HF_TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'vocab.json', 'merges.txt', 'tokenizer.model', 'spiece.model'];

/** Builds the ONNX model directory for `options.source`. */
export function buildModel(options: BuildOptions): BuildResult {
  const started = performance.now();
  const dtype = options.dtype ?? 'fp32';
  const flavor = options.flavor ?? 'portable';
  if (!(dtype in FLOAT_TYPES)) throw invalidArgument('dtype', 'fp32, fp16 or bf16', dtype);
  if (flavor !== 'portable' && flavor !== 'cuda') throw invalidArgument('flavor', 'portable or cuda', flavor);
  const progress = (stage: BuildStage): void => options.onProgress?.(stage, BUILD_STAGES.indexOf(stage), BUILD_STAGES.length);
  if (!existsSync(options.source)) throw new ChorusError('CHORUS_FILE_MISSING', `build source ${options.source} does not exist`, { param: 'source' });

  progress('read checkpoint');
  const kind = checkpointKind(options.source);
  const isLlama2c = kind === 'llama2c';
  const opened = openWeights(readCheckpoint(options.source, kind), options);
  if (dtype === 'bf16' && (opened.hub !== undefined || (options.weights ?? 'checkpoint') !== 'checkpoint')) {
    const what = opened.hub === undefined ? `weights ${options.weights}` : `a ${opened.hub.quantization.method} checkpoint`;
    throw new ChorusError('CHORUS_UNSUPPORTED', `${what} with dtype bf16: ONNX Runtime's MatMulNBits takes fp32 or fp16 activations; build with dtype fp16`, { param: 'dtype' });
  }
  const checkpoint: Checkpoint = opened.checkpoint;
  const architecture = architectureFor(checkpoint.config);
  // The checkpoint's own generation_config.json (beside its config.json), whose ids win over config.json's.
  const sourceDir = kind === 'hf' || kind === 'megatron' ? options.source : dirname(options.source);
  const sourceGeneration = isLlama2c ? undefined : readGenerationConfig(sourceDir);
  const endIds = endIdsOf(checkpoint.config, sourceGeneration);

  const tensorParallel = options.tensorParallel ?? 1;
  if (!Number.isInteger(tensorParallel) || tensorParallel < 1) throw invalidArgument('tensor_parallel', 'an integer >= 1', tensorParallel);
  if (tensorParallel > 1) refuseTensorParallel(options, architecture.kind, String(checkpoint.config.model_type), opened.hub !== undefined);
  const task = options.task ?? 'generate';
  if (task !== 'generate' && task !== 'encode') throw invalidArgument('task', 'generate or encode', task);
  if (options.slotAttention !== undefined && !SLOT_DECODER_ATTENTIONS.includes(options.slotAttention)) {
    throw invalidArgument('slotAttention', `one of ${SLOT_DECODER_ATTENTIONS.join(', ')}`, options.slotAttention);
  }
  const floatType = FLOAT_TYPES[dtype];

  progress('map weights');
  let spec: DecoderSpec | Seq2SeqSpec;
  /** Each model's file and its data file (default: its own), under onnx/. */
  let graphs: Array<[string, () => GraphBuilder, string?]>;
  const greedySearch = options.greedySearch ?? false;
  const slotDecoder = options.slotDecoder ?? false;
  let greedyEos = -1;
  let quantization: QuantSummary | undefined;
  if (architecture.kind === 'decoder') {
    if (task === 'encode') throw new ChorusError('CHORUS_UNSUPPORTED', `task encode needs an encoder; ${String(checkpoint.config.model_type)} is decoder-only`, { param: 'task' });
    if (options.outputAttentions) throw new ChorusError('CHORUS_UNSUPPORTED', 'output attentions applies to encoders', { param: 'outputAttentions' });
    const decoderSpec = architecture.spec(checkpoint.config);
    const built = decoderWeightsFor(opened, architecture.weights(checkpoint, decoderSpec), options);
    const weights = built.weights;
    quantization = built.summary;
    spec = decoderSpec;
    graphs = [['decoder_model_merged.onnx', () => buildDecoderGraph(decoderSpec, weights, floatType, flavor)]];
    if (tensorParallel > 1) {
      checkTensorParallel(decoderSpec, weights, tensorParallel);
      graphs = rankGraphs(decoderSpec, weights, floatType, tensorParallel, options);
    }
    if (greedySearch) {
      if (dtype === 'bf16') throw new ChorusError('CHORUS_UNSUPPORTED', 'the GreedySearch model is built in fp32 or fp16; ONNX Runtime\'s GreedySearch has no bfloat16', { param: 'greedySearch' });
      // ONNX Runtime's GreedySearch stops at one end id: with several it runs to the length (and the
      // engines, which stop at any of them, leave it aside).
      greedyEos = endIds.length === 1 ? endIds[0]! : -1;
      graphs.push([GREEDY_MODEL, () => buildGreedySearchGraph(decoderSpec, weights, floatType, flavor, { eosTokenId: greedyEos })]);
    }
    if (slotDecoder) {
      if (flavor !== 'cuda') throw new ChorusError('CHORUS_UNSUPPORTED', 'the slot decoder is built with the cuda flavor (its fused operators); add --flavor cuda', { param: 'slotDecoder' });
    }
    if (slotDecoder && tensorParallel === 1) {
      graphs.push([SLOT_DECODER_MODEL, () => buildSlotDecoderGraph(decoderSpec, weights, floatType, options.slotAttention, options.slotLinear)]);
      graphs.push([PAGED_DECODER_MODEL, () => buildPagedDecoderGraph(decoderSpec, weights, floatType, options.slotLinear)]);
    }
  } else {
    if (slotDecoder && task !== 'generate') throw new ChorusError('CHORUS_UNSUPPORTED', 'the slot decoder generates; task encode has no decoder', { param: 'slotDecoder' });
    if (greedySearch) throw new ChorusError('CHORUS_UNSUPPORTED', 'the GreedySearch model covers decoder-only models so far', { param: 'greedySearch' });
    if (flavor !== 'portable') throw new ChorusError('CHORUS_UNSUPPORTED', 'the cuda flavor covers decoder-only models so far; build encoder-decoders with --flavor portable', { param: 'flavor' });
    if (opened.hub !== undefined || (options.weights ?? 'checkpoint') !== 'checkpoint') throw new ChorusError('CHORUS_UNSUPPORTED', 'quantized weights cover decoder-only models so far; build encoder-decoders with weights checkpoint from a float checkpoint', { param: 'weights' });
    const seq2seqSpec = architecture.spec(checkpoint.config);
    const weights = architecture.weights(checkpoint, seq2seqSpec, { encoderOnly: task === 'encode' });
    spec = seq2seqSpec;
    graphs = [['encoder_model.onnx', () => buildEncoderGraph(seq2seqSpec, weights, floatType, options.outputAttentions ?? false)]];
    if (task === 'generate') graphs.push(['decoder_model_merged.onnx', () => buildSeq2SeqDecoderGraph(seq2seqSpec, weights, floatType)]);
    if (slotDecoder) {
      graphs.push([SLOT_ENCODER_MODEL, () => buildSeq2SeqSlotEncoderGraph(seq2seqSpec, weights, floatType, options.slotLinear, options.encoderAttention)]);
      graphs.push([SLOT_DECODER_MODEL, () => buildSeq2SeqSlotDecoderGraph(seq2seqSpec, weights, floatType, options.slotLinear)]);
    }
  }
  checkpoint.finish();

  const onnxDir = join(options.out, 'onnx');
  mkdirSync(onnxDir, { recursive: true });
  const files: string[] = [];
  const write = (relative: string, content: string | Uint8Array): void => {
    writeFileSync(join(options.out, relative), content);
    files.push(relative);
  };
  // With the GreedySearch model or the slot decoder, all models keep their weights in the decoder's data
  // file, each weight written once. Otherwise each model has its own, when the weights are large.
  const sharedData = architecture.kind === 'decoder' && (greedySearch || slotDecoder) ? 'decoder_model_merged.onnx_data' : undefined;
  const totalBytes = checkpoint.takenElements() * FLOAT_WIDTH[floatType];
  const external = sharedData !== undefined || tensorParallel > 1 || totalBytes > EMBEDDED_LIMIT;
  let doneBytes = 0;
  const weightWritten = (bytes: number): void => {
    doneBytes += bytes;
    options.onWeights?.(Math.min(doneBytes, totalBytes), totalBytes);
  };
  const dataFiles = new Map<string, ExternalDataFile>();
  const dataFile = (name: string): ExternalDataFile => {
    let file = dataFiles.get(name);
    if (file === undefined) {
      mkdirSync(dirname(join(onnxDir, name)), { recursive: true });
      file = new ExternalDataFile(join(onnxDir, name), basename(name), weightWritten);
      dataFiles.set(name, file);
      files.push(`onnx/${name}`);
    }
    return file;
  };
  try {
    for (const [modelName, build, data] of graphs) {
      progress('build graph');
      const graph = build();
      progress('serialize');
      const externalData = external ? dataFile(data ?? sharedData ?? `${modelName}_data`) : undefined;
      const { model } = graph.serialize({ ...(externalData ? { externalData } : {}), docString: `built by chorus from ${basename(options.source)}`, onEmbedded: weightWritten });
      progress('write files');
      write(`onnx/${modelName}`, model);
    }
  } finally {
    for (const file of dataFiles.values()) file.close();
  }
  const config: Record<string, unknown> = { ...checkpoint.config, ...(dtype === 'fp32' ? {} : { torch_dtype: dtype === 'fp16' ? 'float16' : 'bfloat16' }) };
  // The ONNX files carry the quantization (chorus_build.json says which); the checkpoint's packing is gone.
  delete config.quantization_config;
  if (external) config['transformers.js_config'] = { use_external_data_format: true };
  const stats: BuildStats = { seconds: Math.round((performance.now() - started) / 10) / 100, weightBytes: doneBytes, peakRssBytes: process.resourceUsage().maxRSS * 1024 };
  write('config.json', `${JSON.stringify(config, null, 2)}\n`);
  write('generation_config.json', `${JSON.stringify(generationConfig(checkpoint.config, sourceGeneration, endIds), null, 2)}\n`);
  const info: BuildInfo = { builder: 'chorus', architecture: String(checkpoint.config.model_type), dtype, flavor, task, spec, endIds, ...(greedySearch ? { greedySearch: { eosTokenId: greedyEos } } : {}), ...(slotDecoder ? { slotDecoder: true } : {}), ...(tensorParallel > 1 ? { tensor_parallel: tensorParallel } : {}), ...(quantization === undefined ? {} : { weights: quantization }), stats };
  write('chorus_build.json', `${JSON.stringify(info, null, 2)}\n`);
  const tokenizerFiles = isLlama2c ? [[llama2cTokenizer(options.source, options.tokenizer), 'tokenizer.bin'] as const] : HF_TOKENIZER_FILES.map((name) => [join(kind === 'hf' || kind === 'megatron' ? options.source : dirname(options.source), name), name] as const);
  for (const [from, to] of tokenizerFiles) {
    if (existsSync(from)) {
      copyFileSync(from, join(options.out, to));
      files.push(to);
    }
  }
  return { out: options.out, spec, files, stats, ...(quantization === undefined ? {} : { quantization }) };
}

/**
 * The built model's generation_config.json: the special ids of the checkpoint's generation config, else
 * of its config.json, with the end ids resolved (one id, or the list when there are several).
 */
function generationConfig(config: Record<string, unknown>, source: Record<string, unknown> | undefined, endIds: readonly number[]): Record<string, unknown> {
  const generation: Record<string, unknown> = {};
  for (const key of ['bos_token_id', 'pad_token_id', 'decoder_start_token_id', 'forced_bos_token_id', 'forced_eos_token_id']) {
    const value = source?.[key] ?? config[key];
    if (value !== undefined && value !== null) generation[key] = value;
  }
  if (endIds.length > 0) generation.eos_token_id = endIds.length === 1 ? endIds[0] : [...endIds];
  return generation;
}

function llama2cTokenizer(model: string, given: string | undefined): string {
  if (given !== undefined) {
    if (!existsSync(given)) throw new ChorusError('CHORUS_FILE_MISSING', `tokenizer ${given} does not exist`, { param: 'tokenizer' });
    return given;
  }
  const dir = dirname(model);
  if (existsSync(join(dir, 'tokenizer.bin'))) return join(dir, 'tokenizer.bin');
  const candidates = readdirSync(dir).filter((name) => /^tok.*\.bin$/.test(name));
  if (candidates.length === 1) return join(dir, candidates[0]!);
  throw new ChorusError('CHORUS_FILE_MISSING', `no tokenizer for ${model}: give --tokenizer (looked for tokenizer.bin or one tok*.bin in ${dir})`, { param: 'tokenizer' });
}

/** Refuses by name what tensor parallelism does not cover yet. */
function refuseTensorParallel(options: BuildOptions, kind: 'decoder' | 'seq2seq', modelType: string, hubQuantized: boolean): void {
  const n = options.tensorParallel;
  const refuse = (why: string, param: string): never => {
    throw new ChorusError('CHORUS_UNSUPPORTED', `tensor_parallel ${n} ${why}`, { param, value: n });
  };
  if (kind !== 'decoder') refuse(`covers decoder-only models (gpt2 and the Llama family); ${modelType} is an encoder-decoder`, 'tensor_parallel');
  if (hubQuantized || (options.weights ?? 'checkpoint') !== 'checkpoint') refuse('takes float weights; quantized weights (weights int8, int4, or a GPTQ / AWQ checkpoint) are not split', 'weights');
  if (options.slotDecoder !== true || options.flavor !== 'cuda') refuse('writes the slot and paged decoders the native engine runs: build with the slot decoder and flavor cuda', 'slotDecoder');
  if (options.greedySearch === true) refuse('has no GreedySearch model: build without greedy search', 'greedySearch');
}

/** Each rank's slot and paged decoders, onnx/tp{N}/rank{r}/, sharing the rank's data file (its weights cut when written). */
function rankGraphs(spec: DecoderSpec, weights: DecoderWeights, floatType: FloatType, n: number, options: BuildOptions): Array<[string, () => GraphBuilder, string]> {
  return Array.from({ length: n }, (_, rank) => {
    let share: RankShare | undefined;
    // One share a rank, so its two models point at the same bytes of its data file.
    const shareOf = (): RankShare => (share ??= rankShare(spec, weights, n, rank));
    const dir = `tp${n}/rank${rank}`;
    const data = `${dir}/${SLOT_DECODER_MODEL}_data`;
    return [
      [`${dir}/${SLOT_DECODER_MODEL}`, () => buildSlotDecoderGraph(shareOf().spec, shareOf().weights, floatType, options.slotAttention, options.slotLinear, shareOf().tp), data],
      [`${dir}/${PAGED_DECODER_MODEL}`, () => buildPagedDecoderGraph(shareOf().spec, shareOf().weights, floatType, options.slotLinear, shareOf().tp), data],
    ] as Array<[string, () => GraphBuilder, string]>;
  }).flat();
}
