/**
 * The native engine's addon, when it is built (`npm run build:native`). Loading it never throws: a
 * missing or unloadable addon gives `undefined` and the reason, and Chorus runs the TypeScript engine.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import 'onnxruntime-node'; // loads libonnxruntime.so.1, which the addon links to
import { NATIVE_ADDON } from './build.ts';
import { installError } from './install.ts';

/** Options of the addon's SlotDecoder (see src/native/slot-decoder.h). */
export interface SlotDecoderOptions {
  model: string;
  provider: 'cpu' | 'cuda';
  deviceId?: number;
  slots: number;
  maxLength: number;
  layers: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  dtype: 'fp32' | 'fp16' | 'bf16';
  intraOpThreads?: number;
  /**
   * A paged cache (a model built with PagedAttention): tokens per block. Every layer's cache is then a
   * pool of blocks that rows read through the block table (setBlockTable).
   */
  blockSize?: number;
  /** Paged: blocks in the pool. Default: on CUDA, planned from the GPU's memory; on the CPU, slots x the blocks of maxLength, plus one. */
  blocks?: number;
  /** Paged on CUDA: the share of the GPU's memory the process may take (default 0.9). */
  memoryUtilization?: number;
  /** Paged on CUDA: bytes kept out of the cache for activations. */
  reserveBytes?: number;
  /** CPU: whether ONNX Runtime's intra-op threads spin between a run's parallel sections (default true, ONNX Runtime's own default). */
  intraOpSpinning?: boolean;
  /** CUDA: capture each batch size's decode step as a CUDA graph and replay it. */
  cudaGraph?: boolean;
  /**
   * A cache of slots on CUDA with graphs (one rank, decoder-only): slots past `slots` for the decoder's
   * own use, where the continuous core's joining requests prefill as a captured graph (default 0).
   */
  stagingSlots?: number;
  /** ONNX Runtime's CUDA provider options by their names (gpu_mem_limit, arena_extend_strategy, ...). */
  cudaOptions?: Record<string, string | number>;
  /** Encoder-decoders: onnx/encoder_model_slots.onnx (kvHeads is then the decoder's heads, layers its layers). */
  encoderModel?: string;
  /** Encoder-decoders: the most source tokens a slot's cross-attention cache holds. */
  sourceLength?: number;
  /**
   * Tensor parallelism: the models of ranks 1..N-1 (`model` is rank 0's). Every call runs on every rank
   * at once: CPU ranks as threads of this process, CUDA ranks on their own GPUs (`rankDevices`) over NCCL.
   */
  rankModels?: string[];
  /** CUDA: the device of each of ranks 1..N-1 (rank 0's is deviceId). */
  rankDevices?: number[];
  /** The most milliseconds a rank waits for the others before the group fails the call (default 120000). */
  rankTimeoutMs?: number;
}

/**
 * Rows a step processes and chooses where its logits are (src/native/sampling.h): per row
 * `SAMPLE_PARAM_COUNT` numbers in `params` (temperature, top_p, repetition, presence and frequency
 * penalties, the draw in (0, 1), top_k, top_logprobs, and for a beam how many continuations to return
 * and its running score), its (id, output count) pairs for the penalties and the ids it
 * may not choose, each as offsets into flat arrays.
 */
export interface NativeSampleBatch {
  rows: Int32Array;
  params: Float64Array;
  /** rows + 1 offsets, in pairs, into `seen`. */
  seenOffsets: Int32Array;
  seen: Int32Array;
  /** rows + 1 offsets into `bans`. */
  banOffsets: Int32Array;
  bans: Int32Array;
}

export const SAMPLE_PARAM_COUNT = 10;
/** The most top_logprobs a row may ask for; rows' entries are this far apart in `topTokens`. */
export const MAX_TOP_LOGPROBS = 20;

/** The sampler's choices, in the batch's row order, with their log-probabilities under the processed logits. */
export interface NativeSampled {
  tokens: Int32Array;
  logProbs: Float64Array;
  /**
   * Row i's most likely ids and their log-probabilities (a beam's best continuations by accumulated
   * score): topTokens[i * MAX_TOP_LOGPROBS + j], j < topCounts[i].
   */
  topCounts: Int32Array;
  topTokens: Int32Array;
  topLogProbs: Float64Array;
}

/** What a step gives back: each row's argmax, the asked rows' logits (float32, row after row), and the sampled rows' choices. */
export interface SlotStep {
  argmax: Int32Array;
  logits: Float32Array;
  sampled: NativeSampled;
}

/** One beam search of a decodeBeams call, as far as choosing its beams needs it (src/native/beam-run.h). */
export interface NativeBeamGroup {
  firstRow: number;
  width: number;
  outputLength: number;
  /** Tokens each live beam has (at least 1). */
  generated: number;
  minLength: number;
  /** A hypothesis ends at any of these (none: empty). */
  endIds: Int32Array;
  /** 0: false, 1: true, 2: 'never'. */
  earlyStopping: number;
  improvable: boolean;
  temperature: number;
  lenPenalty: number;
  diversityRate: number;
  /** Each live beam's running score. */
  scores: Float64Array;
  /** The finished hypotheses' scores, best first. */
  finished: Float64Array;
}

/** What decodeBeams gives back: each step's continuations per row (as NativeSampled's top arrays) and parents. */
export interface NativeBeamRun extends NativeSampled {
  parents: Int32Array;
  steps: number;
}

/** A request as the continuous core runs it (src/native/continuous-core.h). */
export interface NativeCoreRequest {
  /** The caller's id of the request; each step's tokens name it. */
  id: number;
  prompt: Int32Array;
  maxTokens: number;
  /** It ends at any of these (none: empty). */
  endIds: Int32Array;
  /** Its first minLength tokens may not be an end id. */
  minLength: number;
  /** Each token the raw argmax (else the sampler chooses, with these parameters). */
  argmax: boolean;
  temperature: number;
  topP: number;
  topK: number;
  topLogProbs: number;
  repetition: number;
  presence: number;
  frequency: number;
  /** The state of its mulberry32 stream (src/util/random.ts seedState): a draw a step when temperature is not 0. */
  random: number;
  /** The (id, count) pairs the penalties start from: the prompt's ids for the repetition penalty, count 0. */
  seen: Int32Array;
}

/** A step of the continuous core: request ids[i] took the sampler's i-th choice (the argmax's log-probability is 0). */
export interface NativeCoreStep {
  /** A prefill's first tokens (else a decode step's). */
  prefill: boolean;
  /** A decode step's rows that joined the run of steps under way (their prompts prefilled behind it): their first tokens. */
  joined: number;
  ids: Int32Array;
  sampled: NativeSampled;
}

/** The slot decoder: its cache of slots lives where the session runs. */
export interface NativeSlotDecoder {
  load(): Promise<void>;
  /** Runs `prompts` prompts of one length (ids one after another; default 1) into slots slot, slot + 1, ... from position 0; a result row per prompt. */
  prefill(slot: number, ids: Int32Array, logitRows: Int32Array, sample?: NativeSampleBatch, prompts?: number): Promise<SlotStep>;
  /**
   * Runs prompts of different lengths into slots slot, slot + 1, ... in two runs (each prompt but its
   * last token right-padded to the longest, then each last token at its own position); a result row
   * per prompt. Contiguous slots only.
   */
  prefillRagged(slot: number, prompts: Int32Array[], logitRows: Int32Array, sample?: NativeSampleBatch): Promise<SlotStep>;
  /** Runs the prefill shapes the continuous core admits with, narrowest first, for up to `budgetMs`; resolves with how many ran. */
  warmCore(budgetMs: number): Promise<number>;
  /**
   * Encoder-decoders: encodes sources (right-padded to `width`, row after row, each of lengths[r]
   * tokens) into the cross-attention caches of slots firstSlot, firstSlot + 1, ...
   */
  encode(firstSlot: number, ids: Int32Array, width: number, lengths: Int32Array): Promise<void>;
  /** One token for rows (slots) 0..n-1, each at its position (its length so far); encoder-decoders give each row's source length. */
  decode(tokens: Int32Array, positions: Int32Array, logitRows: Int32Array, sample?: NativeSampleBatch, sourceLengths?: Int32Array): Promise<SlotStep>;
  /**
   * Greedy steps back to back in the addon's thread, each row's argmax its next input, until every row
   * has stopped (any of endIds, or remaining[r] tokens; rows of 0 run along unread), maxSteps, or
   * interrupt(). tokens[k * rows + r] is row r's token of step k. onStep(k, ids) gets step k's ids (a
   * row each) on the event loop while the run goes on; calls may still come after the promise resolves
   * (its result holds every step's tokens).
   */
  decodeGreedy(
    tokens: Int32Array,
    positions: Int32Array,
    remaining: Int32Array,
    endIds: Int32Array,
    maxSteps: number,
    sourceLengths?: Int32Array,
    /** Each row's steps under its min_length, when its argmax passes over the end id (endIds then holds at most one). */
    minLeft?: Int32Array,
    onStep?: (step: number, ids: Int32Array) => void,
  ): Promise<{ tokens: Int32Array; steps: number }>;
  /**
   * Beam searches (each group `width` consecutive rows, past its first step) stepped back to back in the
   * addon's thread: each step takes every beam's 2 x width best continuations where the logits are,
   * chooses the next beams as BeamSearch does, moves the slots of beams that continue another and feeds
   * the chosen tokens. Rows outside every group run along unread. Stops after the step in which a group
   * finishes, at maxSteps, or at interrupt(). Step k's row r: its continuations at k * rows + r of the
   * top arrays, and the row it continues, parents[k * rows + r]. onStep(k, sampled, parents) gets step
   * k's (row r's continuations at r of sampled's top arrays, its parent at parents[r]) on the event loop
   * while the run goes on; calls may still come after the promise resolves (its result holds every step's).
   */
  decodeBeams(
    tokens: Int32Array,
    positions: Int32Array,
    groups: NativeBeamGroup[],
    maxSteps: number,
    sourceLengths?: Int32Array,
    onStep?: (step: number, sampled: NativeSampled, parents: Int32Array) => void,
  ): Promise<NativeBeamRun>;
  /**
   * Starts the continuous core: a thread that steps the decoder back to back, admitting submitted
   * requests at step boundaries and retiring them at their end id, their last token or a cancellation.
   * onStep gets each step's tokens on the event loop, or the error that stopped it. While it runs the
   * decoder takes no other call but the core's.
   */
  startCore(onStep: (step: NativeCoreStep | Error) => void): void;
  coreSubmit(request: NativeCoreRequest): void;
  /** The request leaves the core at its next step boundary. */
  coreCancel(id: number): void;
  /** Resolves when the core's thread has ended; its requests are dropped. */
  stopCore(): Promise<void>;
  /** Stops a decodeGreedy or decodeBeams under way (or the next one) after its current step. */
  interrupt(): void;
  /**
   * dst[i] <- src[i] (their first lengths[i] positions); a permutation is safe. Encoder-decoders' cross-attention
   * caches move too, their first sourceLengths[i] positions (0: not moved).
   */
  copySlots(sources: Int32Array, destinations: Int32Array, lengths: Int32Array, sourceLengths?: Int32Array): Promise<void>;
  /** Paged: the block table, slots x ceil(maxLength / blockSize) block ids; the next step reads it (no step may be in flight). */
  setBlockTable(table: Int32Array): void;
  /** Paged: copies whole blocks, destinations[i] <- sources[i], in every layer; no destination may be a source. */
  copyBlocks(sources: Int32Array, destinations: Int32Array): Promise<void>;
  /** Gives back the sessions, cache and ranks (on a worker thread); no step may be in flight. */
  close(): Promise<void>;
  readonly cacheBytes: number;
  /** Paged: the pool's blocks (0 otherwise). */
  readonly cacheBlocks: number;
  /** Paged on CUDA: the GPU's memory when the pool was planned, with the weights loaded (zeros otherwise). */
  readonly deviceMemory: { free: number; total: number };
  /** Milliseconds so far inside ONNX Runtime's runs, and inside the decoder's calls in all (runs, argmax, copies). */
  readonly sessionMs: number;
  readonly callMs: number;
  /** Why CUDA graphs were turned off (a decode step's capture failed; its steps run uncaptured since); empty while they are on. */
  readonly graphFailure: string;
  /** Tensor parallelism: each rank's cache bytes, rank 0's first (one entry without ranks). */
  readonly rankCacheBytes: number[];
}

/**
 * One launch of the decoder attention kernels on their own (attendRows): DecoderSlotAttention's
 * (`slot`: caches [rows, kvHeads, capacity, dim]) or PagedAttention's (`paged`: caches [blocks, kvHeads,
 * blockSize, dim] read through blockTable [rows, maxBlocks]). Float arrays are Float32Arrays in fp32,
 * else Uint16Arrays of fp16 or bf16 bits.
 */
export interface NativeAttentionCall {
  op: 'slot' | 'paged';
  dtype?: 'fp32' | 'fp16' | 'bf16';
  rows: number;
  tokens: number;
  heads: number;
  kvHeads: number;
  dim: number;
  /** [rows, tokens, (heads + 2 * kvHeads) * dim]: queries, keys and values packed. */
  qkv: Float32Array | Uint16Array;
  /** [(heads + 2 * kvHeads) * dim], added to qkv. */
  bias?: Float32Array | Uint16Array;
  /** The caches, written in place (each new token's key and value at its position first). */
  key: Float32Array | Uint16Array;
  value: Float32Array | Uint16Array;
  /** Each row's length after this launch, minus one. */
  seqlens: Int32Array;
  scale?: number;
  /** A query at position i attends keys j with i - j < slidingWindow (0: none). */
  slidingWindow?: number;
  /** Scores become softcap * tanh(score / softcap) before the softmax (0: none). */
  softcap?: number;
  /** slot: positions per row's cache. */
  capacity?: number;
  /** paged: the pool and the table (no table: row r's one block is block r, maxBlocks 1). */
  blockSize?: number;
  blocks?: number;
  maxBlocks?: number;
  blockTable?: Int32Array;
  /** paged: rotary caches [rotaryPositions, dim / 2] applied to q and k. */
  rotaryPositions?: number;
  cos?: Float32Array | Uint16Array;
  sin?: Float32Array | Uint16Array;
  /** paged: an RMSNorm of each query and key head before the rotation (Qwen3's), with its epsilon. */
  qNorm?: Float32Array | Uint16Array;
  kNorm?: Float32Array | Uint16Array;
  epsilon?: number;
  /** paged on the GPU: splits of each row's positions (default: the engine's choice). */
  splits?: number;
}

/** Element types runGraph takes and gives back. */
export type GraphElementType = 'float32' | 'float16' | 'bfloat16' | 'uint8' | 'int32' | 'int64';

/** A tensor given to or returned by runGraph: its bytes, row-major, little-endian. */
export interface GraphTensor {
  name: string;
  type: GraphElementType;
  dims: number[];
  data: Uint8Array;
}

/** Options of runGraph. */
export interface GraphRunOptions {
  /** The path of an ONNX model; its `chorus` operators are those of dtype. */
  model: string;
  provider: 'cpu' | 'cuda';
  dtype: 'fp32' | 'fp16' | 'bf16';
  deviceId?: number;
  intraOpThreads?: number;
  /** Runs to time after the first (default 0: none). */
  iterations?: number;
  /** CUDA: capture the run as a CUDA graph and time its replays (inputs and outputs stay on the device). */
  cudaGraph?: boolean;
}

/** Options of runGraphRanks: runGraph's, for every rank. */
export interface GraphRanksOptions extends GraphRunOptions {
  /** Each rank's model (default: `model` for every rank). */
  models?: string[];
  /** CUDA: each rank's device (default: rank r on device r). */
  deviceIds?: number[];
  /** The most milliseconds a rank waits for the others (default 30000). */
  timeoutMs?: number;
  /** A rank that never runs its session, as a hung rank would not. */
  absent?: number;
}

export interface NativeAddon {
  SlotDecoder: new (options: SlotDecoderOptions) => NativeSlotDecoder;
  /** Each row's argmax (the lowest index among equals): on the GPU with `device`, else on the host. */
  argmaxRows(logits: Float32Array | Uint16Array, vocab: number, device: boolean): Int32Array;
  /**
   * The sampler on the batch's rows of `logits`: on the GPU with `device` (the engine's kernel), else on
   * the host; with each row's processed logits. With `repeat` on the GPU, the kernel's mean time over
   * that many more runs (kernelMs, for benchmarks).
   */
  sampleRows(logits: Float32Array | Uint16Array, vocab: number, sample: NativeSampleBatch, device: boolean, repeat?: number): NativeSampled & { processed: Float32Array; kernelMs?: number };
  /** The attention kernels of `call` on the host, or on the GPU with `device` (the engine's kernels): the output [rows, tokens, heads * dim]. */
  attendRows(call: NativeAttentionCall, device: boolean): Float32Array | Uint16Array;
  cudaDevices(): number;
  /** The memory of a CUDA device, in bytes (cudaMemGetInfo). */
  gpuMemory(device: number): { free: number; total: number };
  /**
   * Runs a model with the addon's operators once on `inputs` (on CUDA copied to the device first) and
   * returns its outputs; with `iterations`, also the mean milliseconds of that many further runs.
   */
  runGraph(options: GraphRunOptions, inputs: GraphTensor[]): { outputs: GraphTensor[]; ms: number };
  /**
   * Runs a model with the collectives (AllReduce, AllGather) once on every rank of a tensor-parallel
   * group at once, rank r on inputs[r]: CPU ranks as threads of this process, or a rank per CUDA device
   * over NCCL. Throws one error when a rank fails or the others wait for one past `timeoutMs`.
   */
  runGraphRanks(options: GraphRanksOptions, inputs: GraphTensor[][]): { outputs: GraphTensor[]; ms: number }[];
  /** Whether it was built with the CUDA kernels. */
  cuda: boolean;
  ortApiVersion: number;
}

let loaded: { addon: NativeAddon | undefined; reason: string } | undefined;

/** The addon, or undefined and why not. CHORUS_NATIVE=0 turns it off. */
export function loadNative(): { addon: NativeAddon | undefined; reason: string } {
  if (loaded !== undefined) return loaded;
  if (process.env.CHORUS_NATIVE === '0') loaded = { addon: undefined, reason: 'turned off by CHORUS_NATIVE=0' };
  else if (!existsSync(NATIVE_ADDON)) {
    const why = installError();
    loaded = { addon: undefined, reason: `not built (${why === undefined ? '' : `npm install could not: ${why}; `}npm run build:native writes ${NATIVE_ADDON})` };
  }
  else {
    try {
      loaded = { addon: createRequire(import.meta.url)(NATIVE_ADDON) as NativeAddon, reason: 'built' };
    } catch (error) {
      loaded = { addon: undefined, reason: `${NATIVE_ADDON} does not load: ${(error as Error).message}` };
    }
  }
  return loaded;
}
