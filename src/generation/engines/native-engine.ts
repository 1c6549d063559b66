/**
 * The engine over the native addon (src/native): continuous batching like OrtEngine, but the cache
 * never leaves the device. Each running row owns a slot of the SlotDecoder's preallocated cache (rows
 * 0..n-1 are slots 0..n-1); a step sends only the rows' last tokens and lengths (and, for rows that
 * sample, their parameters) and gets back each row's chosen token. Greedy rows take the argmax where the
 * logits are; sampling rows with their penalties, bans, temperature, top-k and top-p run the addon's
 * sampler there (src/native/sampling.h, the processors' twin) with a draw from the request's own
 * stream, and its top_logprobs; each beam of a beam search (up to 10 beams) gets its 2 x beam_width best
 * continuations from the sampler's beam mode, and BeamSearch goes on from those; when only such beam
 * searches run, the addon steps them back to back itself, choosing the beams and moving their slots
 * between steps, and each search replays those steps here. A token the model
 * forces (forced_bos, forced_eos) needs no logits at all. Only wider beam searches bring their rows'
 * logits to the host, where the TypeScript processors run as in OrtEngine. Requests are prefilled
 * into the next free slots, those admitted together with prompts of one length as one batch; when
 * requests leave, the rows behind them move down, and when a beam search reorders its beams, their
 * slots are permuted on the device.
 *
 * Encoder-decoders (built with --slot-decoder: onnx/encoder_model_slots.onnx beside the decoder) run
 * the same loop: the requests admitted together are encoded as one batch straight into their slots'
 * cross-attention caches, and their first decoder token (the decoder's start) joins the next step.
 * Every step is one token per row; a slot's cross-attention cache moves with its row only when the row
 * lands in a slot holding another request's source (never between the beams of one request).
 *
 * Sessions and copies run on libuv's worker threads: the event loop never waits on the GPU.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import type { Observable } from 'rxjs';
import { ChorusError } from '../../errors.ts';
import { readGenerationConfig } from '../../util/end-ids.ts';
import { PAGED_DECODER_MODEL } from '../../modelbuild/decoder-graph.ts';
import { SLOT_DECODER_MODEL, SLOT_ENCODER_MODEL } from '../../modelbuild/greedy-layout.ts';
import { loadNative, MAX_TOP_LOGPROBS, type NativeAddon, type NativeBeamRun, type NativeSampleBatch, type NativeSampled, type NativeSlotDecoder, type SlotStep } from '../../native/index.ts';
import { decoderModel, keptRows, stepMembers } from '../core/batch-rows.ts';
import { checkUtilization, DEFAULT_GPU_MEMORY_UTILIZATION, gib, pagedPlan, PAGED_PREFILL_TOKENS, slotsFit, weightBytes, type MemoryShape } from './native-memory.ts';
import { PagedCache } from '../core/paged-cache.ts';
import { BeamSequence } from '../core/beam-sequence.ts';
import type { Engine, EngineStats, GenerateRequest, RequestMetrics, TokenEvent } from '../core/engine.ts';
import { RequestLedger } from '../core/request-ledger.ts';
import { Scheduler, type SchedulerLimits } from '../core/scheduler.ts';
import { packSamplerRows, sampledChoice, sampledTop } from './native-sampler.ts';
import type { SamplerRow } from '../core/sampler.ts';
import { countNativeSession, exactFp32CudaOptions } from '../../runtime/index.ts';
import { argmaxEligible, bannedArgmaxEligible, Sequence, type ActiveRequest, type ModelIds } from '../core/sequence.ts';
import { seq2seqModel } from './seq2seq-engine.ts';
import { TurnLoop } from './turn-loop.ts';
import { coreTakes, CoreRunner } from './native-core.ts';
import { rankFile, rankLayout, rankShares, rankWeights } from './native-ranks.ts';

/** Options of `NativeEngine.open`. */
export interface NativeEngineOptions extends Partial<SchedulerLimits> {
  /** Where the session and the cache live. Default: cpu. */
  provider?: 'cpu' | 'cuda';
  deviceId?: number;
  /**
   * Tokens one slot holds (prompt plus output). Default: the model's context, at most 2048. The cache
   * takes maxBatchSize slots of this length, allocated when the engine opens.
   */
  slotLength?: number;
  /** ONNX Runtime's CUDA provider options by their names (gpu_mem_limit, arena_extend_strategy, ...). */
  cudaOptions?: Record<string, string | number>;
  /**
   * Encoder-decoders: the most source tokens a request may bring (its slot's cross-attention cache).
   * Default: 512, at most the model's positions (BART's max_position_embeddings).
   */
  sourceLength?: number;
  /** CUDA: replay each batch size's decode step as a captured CUDA graph. Default: false. */
  cudaGraph?: boolean;
  /** The ids generation ends at (any of them), in place of the model's. Default: generation_config.json's eos_token_id, else config.json's. */
  endIds?: readonly number[];
  /**
   * Run the requests it can (native-core.ts: not beam searches, bad words, factual-nucleus sampling or
   * models that force tokens) on the addon's continuous core: a thread that steps back to back,
   * admitting and retiring rows between steps, without waiting on the event loop. Decoder-only models
   * with a cache of slots; elsewhere the step loop runs, with a line to the log saying why. Default: false.
   */
  continuous?: boolean;
  /**
   * A request's tokens independent of what shares its steps: every decode step runs all maxBatchSize
   * rows (free slots padded), and encoder-decoders encode each source alone. In float16 a matrix
   * product's kernel (and so its rounding) depends on how many rows it has; a fixed row count keeps one
   * kernel. It costs the whole batch's step when few requests run. Default: false.
   */
  batchInvariant?: boolean;
  /**
   * The most steps that greedy batches (every row the raw argmax) and batches of beam searches run back
   * to back inside the addon per call. A greedy step's tokens reach their streams as the step ends; a
   * beam search's come when it finishes. A new request, a cancellation or a greedy row that stops while
   * others go on ends the run after the step under way. Default: 1024 (as far as the slots have room);
   * 1: a call per step.
   */
  greedySteps?: number;
  /**
   * Decoder-only models built with onnx/decoder_model_paged.onnx: the cache as a pool of blocks that
   * rows take as they grow (the addon's PagedAttention reads them through a block table), so that it
   * holds the tokens requests have rather than maxBatchSize x slotLength. true, false, or 'auto' (the
   * default): paged on CUDA when the slots would not fit the GPU beside the weights, for a split model,
   * and for an fp32 rotary model (whose slot attention, GroupQueryAttention, would run on the CPU).
   */
  pagedCache?: boolean | 'auto';
  /** Paged: tokens per block. Default: 16. */
  blockSize?: number;
  /** Paged: blocks in the pool. Default: on CUDA, what the GPU has left (gpuMemoryUtilization); on the CPU, enough for every slot. */
  cacheBlocks?: number;
  /** CUDA: the share of the GPU's memory that weights, activations and cache may take, in (0, 1]. Default: 0.9. */
  gpuMemoryUtilization?: number;
  /**
   * Decoder-only models built split over N ranks (tensor_parallel: N): run the N ranks at once, rank r
   * on GPU rankDevices[r - 1] (rank 0 on deviceId), or on the CPU as threads of this process (each rank's
   * session with its share of the cores, unless intraOpThreads is given). Default: 1.
   */
  tensorParallel?: number;
  /** CUDA with tensorParallel N: the GPUs of ranks 1..N-1, each its own. */
  rankDevices?: number[];
  /** Lines worth saying at load (the cache's size). */
  log?: (line: string) => void;
  /**
   * ONNX Runtime's intra-op threads. Default: one a core; on the CPU, one for models whose weights are
   * under 16 MiB (stories260K: each product takes less than waking a thread to share it).
   */
  intraOpThreads?: number;
  /** CPU: whether ONNX Runtime's intra-op threads spin between a run's parallel sections (default: not on the CPU). */
  intraOpSpinning?: boolean;
  onRequestDone?: (metrics: RequestMetrics) => void;
}

/** The slot decoder's shape, from chorus_build.json: a decoder-only spec, or an encoder-decoder's. */
interface BuiltSpec {
  numLayers?: number;
  numKvHeads?: number;
  decoderLayers?: number;
  numHeads?: number;
  headDim: number;
  vocabSize: number;
  positions?: { kind: string };
}

/** What chorus_build.json says of a directory, as far as the native engine needs it. */
interface BuildInfo {
  dtype: 'fp32' | 'fp16' | 'bf16';
  spec: BuiltSpec;
  slotDecoder?: boolean;
  /** Quantized projections: how (absent: float weights). */
  weights?: { weights: string };
  /** The decoders were split over this many ranks, in onnx/tp{N}/rank{r}/ (absent: 1). */
  tensor_parallel?: number;
}

/** The load log's weights half of the memory split: their size (every rank's) and how they are stored. */
function weightsText(dir: string, model: string, info: BuildInfo, n: number): string {
  const bytes = n === 1 ? weightBytes(dir, model) : rankWeights(dir, n, model).reduce((a, b) => a + b, 0);
  return `weights ${gib(bytes)} (${info.weights === undefined ? info.dtype : `${info.weights.weights} projections, ${info.dtype} activations`})`;
}

/** Why a model directory cannot run on the native engine (undefined: it can). */
export function nativeUnavailable(dir: string): string | undefined {
  return nativeFor(dir).unavailable;
}

/** The addon and the directory's build, or why the native engine cannot run it. */
function nativeFor(dir: string): { addon: NativeAddon; info: BuildInfo; unavailable?: undefined } | { unavailable: string } {
  const { addon, reason } = loadNative();
  if (addon === undefined) return { unavailable: `the native engine is ${reason}` };
  let info: BuildInfo | undefined;
  try {
    info = JSON.parse(readFileSync(join(dir, 'chorus_build.json'), 'utf8')) as BuildInfo;
  } catch {
    info = undefined;
  }
  if (info?.slotDecoder !== true) return { unavailable: `${dir} has no slot decoder (build it with chorus build --slot-decoder, and --flavor cuda for a decoder-only model)` };
  return { addon, info };
}

/** Weights under which a CPU session takes one intra-op thread. */
const SMALL_MODEL_BYTES = 16 * 2 ** 20;

/**
 * A small model on the CPU runs on one intra-op thread: a step's 50-100 parallel sections each take a
 * few microseconds, less than waking a second thread (bench/cpu/batch1-levers.ts: stories260K 1.3-2.3x
 * at batch 1, 1.1-1.2x at 16 rows).
 */
function smallModelThreads(provider: 'cpu' | 'cuda' | undefined, dir: string): { intraOpThreads?: number } {
  return (provider ?? 'cpu') === 'cpu' && weightBytes(dir, SLOT_DECODER_MODEL) < SMALL_MODEL_BYTES ? { intraOpThreads: 1 } : {};
}

/** Continuous batching over the native SlotDecoder. */
export class NativeEngine implements Engine {
  private readonly scheduler: Scheduler<ActiveRequest>;
  /** Counted among the open sessions until closed. */
  private open = true;
  private readonly ledger: RequestLedger;
  /** The requests in the slots, in row order (each takes `rows` consecutive rows). */
  private members: ActiveRequest[] = [];
  /** Tokens in each row's slot. */
  private lengths: number[] = [];
  /** Encoder-decoders: each row's source tokens, and the request whose source each slot's cross-attention cache holds. */
  private sourceLengths: number[] = [];
  private crossOwners: Array<ActiveRequest | undefined> = [];
  private log: ((line: string) => void) | undefined;
  /** Whether the decoder's turning CUDA graphs off (a capture that failed) was logged. */
  private graphFailureLogged = false;
  /** The step loop: prefills and decode steps until no request runs or waits. */
  private readonly loop = new TurnLoop(
    () => (this.core !== undefined && this.members.length === 0 && coreTakes(this.scheduler.waiting[0], this.model) ? this.core.run() : this.run()),
    () => this.scheduler.waiting.length + this.scheduler.running.length > 0,
  );

  private constructor(
    private readonly decoder: NativeSlotDecoder,
    limits: SchedulerLimits,
    private readonly model: ModelIds,
    onRequestDone: ((metrics: RequestMetrics) => void) | undefined,
    /** Encoder-decoders: the sources' limit (undefined: decoder-only). */
    private readonly sourceLimit: number | undefined,
    private readonly slotLength: number,
    /** Batch-invariant decoding: the rows every step runs (undefined: as many as run). */
    private readonly fixedRows: number | undefined,
    private readonly greedySteps: number,
    /** The paged cache's rows (undefined: a cache of whole slots). */
    private readonly paged: PagedCache | undefined,
    continuous: boolean,
  ) {
    this.scheduler = new Scheduler(limits);
    this.ledger = new RequestLedger(onRequestDone);
    this.core = continuous ? new CoreRunner(decoder, this.scheduler, this.ledger, model) : undefined;
  }

  /** The continuous core, when the engine runs one. */
  private readonly core: CoreRunner | undefined;

  /** Opens a model directory built with the slot decoder; fails, saying why, when the addon or the model is missing. */
  static async open(dir: string, options: NativeEngineOptions = {}): Promise<NativeEngine> {
    const native = nativeFor(dir);
    if (native.unavailable !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', native.unavailable, { param: 'engine' });
    const { addon, info } = native;
    if (info.dtype === 'bf16' && options.provider !== 'cuda') {
      throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} is a bf16 build, which runs on CUDA; on the CPU build the model in fp32`, { param: 'dtype' });
    }
    const { spec } = info;
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const seq2seq = spec.decoderLayers !== undefined;
    const { model, context } = seq2seq ? seq2seqModel(dir, config, spec.vocabSize, options.endIds) : decoderModel(config, spec.vocabSize, readGenerationConfig(dir), options.endIds);
    const slotLength = options.slotLength ?? Math.min(context, seq2seq ? 512 : options.contextLength ?? 2048);
    const bound = (value: number, name: string, least: number, most: number): number => {
      if (!Number.isInteger(value) || value < least || value > most) {
        throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${name} must be an integer from ${least} to the model's ${most}, not ${value}`, { param: name });
      }
      return value;
    };
    bound(slotLength, 'slotLength', 2, context);
    const sourceLimit = seq2seq ? bound(options.sourceLength ?? Math.min(context, 512), 'sourceLength', 1, context) : undefined;
    const slots = options.maxBatchSize ?? 16;
    // An encoder-decoder's request keeps its source in the cross-attention slot and its output in the decoder's.
    const perRow = slotLength + (sourceLimit ?? 0);
    const limits: SchedulerLimits = {
      maxBatchSize: slots,
      maxQueue: options.maxQueue ?? 1024,
      contextLength: Math.min(options.contextLength ?? perRow, perRow),
      kvTokenBudget: Math.min(options.kvTokenBudget ?? slots * perRow, slots * perRow),
    };
    const utilization = checkUtilization(options.gpuMemoryUtilization ?? DEFAULT_GPU_MEMORY_UTILIZATION, 'gpuMemoryUtilization');
    const shape: MemoryShape = {
      layers: (seq2seq ? spec.decoderLayers : spec.numLayers) ?? 0,
      kvHeads: (seq2seq ? spec.numHeads : spec.numKvHeads) ?? 0,
      headDim: spec.headDim,
      heads: spec.numHeads ?? 0,
      vocab: spec.vocabSize,
      element: info.dtype === 'fp32' ? 4 : 2,
    };
    const cuda = options.provider === 'cuda' ? { devices: [options.deviceId ?? 0, ...(options.rankDevices ?? [])], count: addon.cudaDevices() } : undefined;
    const layout = rankLayout(dir, options.tensorParallel ?? 1, info.tensor_parallel ?? 1, { numHeads: spec.numHeads ?? 0, numKvHeads: spec.numKvHeads ?? 0 }, cuda);
    const tp = layout.n;
    if (tp > 1) shape.kvHeads = layout.kvHeads;
    const ranks = tp === 1 ? undefined : { n: tp, devices: layout.devices, weights: (file: string) => rankWeights(dir, tp, file) };
    // ONNX Runtime's GroupQueryAttention, the slot decoder's attention for rotary models, has CUDA kernels
    // for fp16 and bf16 only: in fp32 it runs on the CPU, copying to and from the device in every step,
    // which no CUDA graph may capture (an attempt can abort the process inside ONNX Runtime).
    const slotAttentionOnHost = options.provider === 'cuda' && info.dtype === 'fp32' && spec.positions?.kind === 'rotary';
    const paging = seq2seq ? undefined : pagedPlan((device) => addon.gpuMemory(device), dir, PAGED_DECODER_MODEL, SLOT_DECODER_MODEL, { ...options, slotAttentionOnHost }, shape, slots, slotLength, utilization, ranks);
    const modelFile = paging === undefined ? SLOT_DECODER_MODEL : PAGED_DECODER_MODEL;
    // Slots asked for anyway (or no paged decoder built): graphs off, as the attention runs on the CPU.
    const hostAttention = slotAttentionOnHost && paging === undefined;
    // The continuous core's joining requests prefill in slots of their own as a captured graph (a few
    // at a time behind many running rows: up to 4, one per 16 slots), where those fit beside the cache;
    // else they prefill op by op in their own slots.
    let staging = 0;
    if (options.continuous === true && options.provider === 'cuda' && options.cudaGraph === true && !hostAttention && paging === undefined && !seq2seq && tp === 1 && options.batchInvariant !== true) {
      staging = joinGroup(slots);
      if (!slotsFit((device) => addon.gpuMemory(device), dir, SLOT_DECODER_MODEL, options.deviceId ?? 0, shape, slots, staging, slotLength, utilization)) {
        options.log?.(`continuous core: no room for ${staging} staging slots beside the cache; joining requests prefill op by op`);
        staging = 0;
      }
    }
    if (hostAttention && options.cudaGraph === true) {
      options.log?.('CUDA graphs off: the fp32 slot decoder runs GroupQueryAttention on the CPU (fp16, bf16 or the paged cache run on the GPU alone)');
    }
    const cudaOptions = options.provider === 'cuda' ? exactFp32CudaOptions(options.cudaOptions) : options.cudaOptions;
    const decoder = new addon.SlotDecoder({
      model: join(dir, 'onnx', rankFile(tp, 0, modelFile)),
      ...(tp === 1 ? {} : { rankModels: Array.from({ length: tp - 1 }, (_, r) => join(dir, 'onnx', rankFile(tp, r + 1, modelFile))) }),
      ...(tp > 1 && layout.devices.length > 0 ? { rankDevices: layout.devices.slice(1) } : {}),
      ...(paging ?? {}),
      provider: options.provider ?? 'cpu',
      deviceId: options.deviceId ?? 0,
      slots,
      maxLength: slotLength,
      layers: (seq2seq ? spec.decoderLayers : spec.numLayers) ?? 0,
      kvHeads: shape.kvHeads,
      headDim: spec.headDim,
      vocab: spec.vocabSize,
      dtype: info.dtype,
      ...(options.intraOpThreads === undefined ? (tp > 1 ? cpuRankThreads(options.provider, tp) : smallModelThreads(options.provider, dir)) : { intraOpThreads: options.intraOpThreads }),
      // On the CPU, threads that wait without spinning leave the cores to the other runs and the event loop.
      intraOpSpinning: options.intraOpSpinning ?? (options.provider ?? 'cpu') !== 'cpu',
      // fp32 means fp32 on CUDA too, as for every session Chorus opens (runtime/sessions.ts).
      ...(cudaOptions === undefined ? {} : { cudaOptions }),
      ...(sourceLimit === undefined ? {} : { encoderModel: join(dir, 'onnx', SLOT_ENCODER_MODEL), sourceLength: sourceLimit }),
      cudaGraph: (options.cudaGraph ?? false) && !hostAttention,
      ...(staging > 0 ? { stagingSlots: staging } : {}),
    });
    try {
      await decoder.load();
    } catch (error) {
      if (paging === undefined || !/no room for the cache/.test(String((error as Error).message))) throw error;
      throw new ChorusError('CHORUS_DEVICE_MEMORY', (error as Error).message, { param: 'gpu_memory_utilization', cause: error });
    }
    countNativeSession(true);
    const greedySteps = bound(options.greedySteps ?? 1024, 'greedySteps', 1, 1024);
    let paged: PagedCache | undefined;
    if (paging !== undefined) {
      paged = new PagedCache(decoder.cacheBlocks, paging.blockSize, slots, Math.ceil(slotLength / paging.blockSize));
      // Rows reserve whole blocks (the scheduler rounds each up), so every block of the pool can be reserved.
      limits.blockSize = paged.blockSize;
      limits.kvTokenBudget = Math.min(options.kvTokenBudget ?? paged.tokens, paged.tokens);
      decoder.setBlockTable(paged.table());
      const memory = decoder.deviceMemory;
      const device = memory.total > 0 ? ` (GPU: ${gib(memory.total - memory.free)} in use with the weights, of ${gib(memory.total)})` : '';
      options.log?.(`paged cache: ${paged.tokens} tokens in ${paged.blocks - 1} blocks of ${paged.blockSize}, ${gib(decoder.cacheBytes)}${device}; ${Math.floor((paged.blocks - 1) / paged.blocksPerRow)} sequences of ${slotLength} tokens fit at once; ${weightsText(dir, PAGED_DECODER_MODEL, info, tp)}`);
    } else {
      options.log?.(`cache: ${slots} slots of ${slotLength} tokens, ${gib(decoder.cacheBytes)}; ${weightsText(dir, SLOT_DECODER_MODEL, info, tp)}`);
    }
    if (tp > 1) options.log?.(rankShares(dir, layout, modelFile, decoder.rankCacheBytes));
    const continuous = options.continuous === true && continuousAvailable(seq2seq, paged !== undefined, options.batchInvariant === true, options.log);
    if (continuous && options.provider === 'cuda' && process.env.CHORUS_GRAPH_WARMUP !== '0') await warmCore(decoder, slots, options.cudaGraph === true && !hostAttention, options.log);
    const engine = new NativeEngine(decoder, limits, model, options.onRequestDone, sourceLimit, slotLength, options.batchInvariant === true ? slots : undefined, greedySteps, paged, continuous);
    engine.log = options.log;
    return engine;
  }

  /** Bytes of the preallocated cache. */
  get cacheBytes(): number {
    return this.decoder.cacheBytes;
  }

  /** The paged cache's blocks (undefined: a cache of whole slots): those no row holds, and all that rows may hold. */
  get pagedBlocks(): { free: number; total: number } | undefined {
    return this.paged === undefined ? undefined : { free: this.paged.freeBlocks, total: this.paged.blocks - 1 };
  }

  /** Where the time went (milliseconds so far): inside ONNX Runtime's runs, and inside the addon's calls in all. */
  profile(): { sessionMs: number; nativeMs: number } {
    return { sessionMs: this.decoder.sessionMs, nativeMs: this.decoder.callMs };
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    // A new request or a cancellation stops the step loop's run of greedy steps after the step under
    // way; the continuous core decides for its own runs (a run of chosen steps takes requests in as it goes).
    return this.ledger.submit(
      request,
      this.model,
      (sequence) => {
        if (this.sourceLimit !== undefined) this.checkSeq2Seq(sequence);
        this.scheduler.enqueue(sequence);
        if (this.core?.running === true) {
          this.core.pump();
        } else {
          this.decoder.interrupt();
          this.loop.start();
        }
      },
      () => {
        if (this.core?.running === true) this.core.pump();
        else this.decoder.interrupt();
      },
    );
  }

  /** An encoder-decoder's request fits when its source fits a cross-attention slot and its output (after the start token) a decoder slot. */
  private checkSeq2Seq(s: ActiveRequest): void {
    const source = s.promptIds.length;
    if (source === 0 || source > this.sourceLimit!) {
      throw new ChorusError('CHORUS_CANNOT_FIT', `the source is ${source} tokens; this engine takes 1 to ${this.sourceLimit!} (sourceLength)`, { param: 'inputIds' });
    }
    if (s.params.request_output_len + 1 > this.slotLength) {
      throw new ChorusError('CHORUS_CANNOT_FIT', `request_output_len ${s.params.request_output_len} needs ${s.params.request_output_len + 1} decoder positions; a slot holds ${this.slotLength}`, { param: 'request_output_len' });
    }
  }

  stats(): EngineStats {
    return {
      running: this.scheduler.running.length,
      waiting: this.scheduler.waiting.length,
      reservedTokens: this.scheduler.reserved(),
      cacheTokens: this.lengths.reduce((sum, n) => sum + n, 0),
      ...this.ledger.counters,
    };
  }

  async close(): Promise<void> {
    this.ledger.close();
    for (const s of [...this.scheduler.waiting, ...this.scheduler.running]) s.cancelled = true;
    this.decoder.interrupt();
    this.core?.abort();
    await this.loop.idle();
    if (this.open) countNativeSession(false);
    this.open = false;
    await this.decoder.close();
  }

  private async run(): Promise<void> {
    while (this.scheduler.running.length + this.scheduler.waiting.length > 0) {
      const { admitted, left } = this.scheduler.schedule();
      for (const s of left) this.ledger.report(s);
      const now = performance.now();
      for (const s of admitted) s.admittedAt = now;
      try {
        if (left.length > 0) await this.dropRows(left);
        if (admitted.length > 0 && this.sourceLimit === undefined) await this.prefill(admitted);
        else {
          // Encoder-decoders' admitted requests are encoded, then step with the rest.
          if (admitted.length > 0) await this.encode(admitted);
          if (this.members.length > 0) await this.decode();
        }
      } catch (error) {
        for (const s of [...admitted, ...this.members]) {
          if (s.finished) continue;
          s.finished = true;
          s.subscriber.error(error);
        }
        this.clearRows();
      }
      this.ledger.counters.steps++;
      if (!this.graphFailureLogged && this.decoder.graphFailure !== '') {
        this.graphFailureLogged = true;
        this.log?.(`CUDA graphs off: a decode step could not be captured (${this.decoder.graphFailure}); its steps run uncaptured`);
      }
      // Let submissions and cancellations in between steps.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.clearRows();
  }

  private clearRows(): void {
    this.paged?.clear();
    this.members = [];
    this.lengths = [];
    this.sourceLengths = [];
  }

  /** The request when its tokens are the raw argmax (its logits can stay on the device), else undefined. */
  private argmaxOnly(s: ActiveRequest): Sequence | undefined {
    return argmaxEligible(s, this.model) ? s : undefined;
  }

  /** Rows j of the next layout continue rows sources[j]: their slots move there on the device. */
  private async moveRows(sources: readonly number[]): Promise<void> {
    if (this.paged !== undefined) {
      // Rows take their blocks along; a row continued twice (a beam) gets a copy of them.
      const copies = this.paged.move(sources);
      if (copies.from.length > 0) await this.decoder.copyBlocks(Int32Array.from(copies.from), Int32Array.from(copies.to));
      this.lengths = sources.map((source) => this.lengths[source]!);
      return;
    }
    const from: number[] = [];
    const to: number[] = [];
    const lengths: number[] = [];
    // An encoder-decoder's cross-attention cache moves only into a slot holding another request's source.
    const seq2seq = this.sourceLimit !== undefined;
    const owners = this.crossOwners;
    const crossLengths: number[] = [];
    sources.forEach((source, row) => {
      if (source === row) return;
      from.push(source);
      to.push(row);
      lengths.push(this.lengths[source]!);
      if (seq2seq) crossLengths.push(owners[row] === owners[source] ? 0 : this.sourceLengths[source]!);
    });
    if (from.length > 0) {
      await this.decoder.copySlots(Int32Array.from(from), Int32Array.from(to), Int32Array.from(lengths), seq2seq ? Int32Array.from(crossLengths) : undefined);
    }
    this.lengths = sources.map((source) => this.lengths[source]!);
    if (seq2seq) {
      this.sourceLengths = sources.map((source) => this.sourceLengths[source]!);
      this.crossOwners = [...sources.map((source) => owners[source]), ...owners.slice(sources.length)];
    }
  }

  /** Moves the rows behind requests that left down into their slots. */
  private async dropRows(left: readonly ActiveRequest[]): Promise<void> {
    const kept = keptRows(this.members, left);
    this.members = kept.members;
    await this.moveRows(kept.rows);
  }

  /**
   * Prefills the admitted requests into the next free slots, each one's first token out of it. Requests
   * in a row with prompts of one length run as one batch (of 1, 2, 4, ... prompts); a beam search (which spreads its prompt's row
   * over its beams) and, on a batch-invariant engine, every request run alone.
   */
  private async prefill(admitted: readonly ActiveRequest[]): Promise<void> {
    const together = (a: ActiveRequest, b: ActiveRequest): boolean =>
      this.fixedRows === undefined && a instanceof Sequence && b instanceof Sequence && a.promptIds.length === b.promptIds.length;
    for (let i = 0; i < admitted.length; ) {
      let count = 1;
      while (i + count < admitted.length && together(admitted[i]!, admitted[i + count]!)) count++;
      // A paged engine keeps a prefill's activations to the reserve it planned for.
      if (this.paged !== undefined) count = Math.max(1, Math.min(count, Math.floor(PAGED_PREFILL_TOKENS / admitted[i]!.promptIds.length)));
      // In batches of powers of two: ONNX Runtime plans each new shape it meets, and so meets few.
      const group = admitted.slice(i, i + 2 ** Math.floor(Math.log2(count)));
      i += group.length;
      const live = group.filter((s) => !s.cancelled);
      if (live.length === 0) continue;
      const slot = this.lengths.length;
      const length = live[0]!.promptIds.length;
      const step = new StepPlan();
      const plans = live.map((s, r) => step.add(s, r, this.argmaxOnly(s)));
      const ids = new Int32Array(live.length * length);
      live.forEach((s, r) => ids.set(s.promptIds, r * length));
      this.growRows(live.map((_, r) => [slot + r, length]));
      const out = await this.decoder.prefill(slot, ids, Int32Array.from(step.logitRows), step.sample(), live.length);
      this.ledger.counters.prefillSteps++;
      for (const [r, s] of live.entries()) {
        this.lengths.push(length);
        this.members.push(s);
        const next = step.finish(s, plans[r]!, r, out, this.model.vocabSize);
        if (next !== undefined) await this.moveRows([...Array(slot + r).keys(), ...next.map((parent) => slot + r + parent)]);
      }
    }
  }

  /**
   * Encoder-decoders: encodes the admitted requests' sources as one batch (right-padded) into the next
   * free slots; each joins the batch with an empty decoder slot, its start token next.
   */
  private async encode(admitted: readonly ActiveRequest[]): Promise<void> {
    const live = admitted.filter((s) => !s.cancelled);
    if (live.length === 0) return;
    // Batch-invariant: each source alone, so that its encoding does not depend on its batch either.
    if (this.fixedRows !== undefined && live.length > 1) {
      for (const s of live) await this.encode([s]);
      return;
    }
    const width = Math.max(...live.map((s) => s.promptIds.length));
    const ids = new Int32Array(live.length * width);
    live.forEach((s, r) => ids.set(s.promptIds, r * width));
    const first = this.lengths.length;
    await this.decoder.encode(first, ids, width, Int32Array.from(live, (s) => s.promptIds.length));
    this.ledger.counters.prefillSteps++;
    live.forEach((s, r) => {
      this.members.push(s);
      this.lengths.push(0);
      this.sourceLengths.push(s.promptIds.length);
      this.crossOwners[first + r] = s;
    });
  }

  /** One token for every running row. */
  private async decode(): Promise<void> {
    // An encoder-decoder's request begins with the decoder's start token (its context's last).
    const tokens: number[] = [];
    const bases = this.members.map((s) => {
      const base = tokens.length;
      tokens.push(...s.lastTokens());
      return base;
    });
    const lengths = [...this.lengths];
    const sourceLengths = this.sourceLimit === undefined ? undefined : [...this.sourceLengths];
    // Greedy rows, min_length's among them (their argmax passes over the end id), run steps back to back.
    const greedy = this.members.every((s) => !s.forcing && bannedArgmaxEligible(s, this.model)) ? this.greedyRun() : 0;
    if (greedy > 1) {
      await this.decodeGreedy(tokens, lengths, sourceLengths, greedy);
      return;
    }
    // So do beam searches whose processors the addon's sampler applies alone.
    const beams = this.beamRun();
    if (beams > 1) {
      await this.decodeBeams(tokens, bases, lengths, sourceLengths, beams);
      return;
    }
    const step = new StepPlan();
    const plan = new Map<ActiveRequest, Choosing>();
    this.members.forEach((s, i) => plan.set(s, step.add(s, bases[i]!, this.argmaxOnly(s))));
    this.ledger.counters.decodeSteps++;
    this.ledger.counters.decodedRows += tokens.length;
    // Batch-invariant: the free slots' rows pad the step to its fixed size (their outputs unread).
    padRows(this.fixedRows, tokens, lengths, sourceLengths);
    this.growRows(this.lengths.map((n, r) => [r, n + 1]));
    const out = await this.decoder.decode(Int32Array.from(tokens), Int32Array.from(lengths), Int32Array.from(step.logitRows), step.sample(), sourceLengths && Int32Array.from(sourceLengths));
    this.lengths = this.lengths.map((n) => n + 1);
    const sources = stepMembers(this.members, (s, base) => step.finish(s, plan.get(s)!, base, out, this.model.vocabSize));
    if (sources !== undefined) await this.moveRows(sources);
  }

  /**
   * How many greedy steps to run back to back (0 or 1: one step): up to greedySteps while no request
   * waits to join, as far as every row's slot has room. (Each step's tokens reach their streams as the
   * step ends, a request's first token among them.)
   */
  private greedyRun(): number {
    if (this.greedySteps === 1 || this.scheduler.waiting.length > 0) return 0;
    return Math.min(this.greedySteps, ...this.lengths.map((n) => this.slotLength - n));
  }

  /**
   * How many beam-search steps to run back to back (0 or 1: one step): when every running request is a
   * beam search the addon can step (BeamSequence.runnableSteps), up to greedySteps while no waiting
   * request could join now, as far as every slot has room. (A run ends with the first search to
   * finish, which is when a waiting one may fit.)
   */
  private beamRun(): number {
    // A paged cache moves beams through its block table, between steps here.
    if (this.greedySteps === 1 || this.scheduler.nextFits() || this.paged !== undefined) return 0;
    if (!this.members.every((s) => s instanceof BeamSequence && 2 * s.width <= MAX_TOP_LOGPROBS)) return 0;
    return Math.min(this.greedySteps, ...this.lengths.map((n) => this.slotLength - n), ...(this.members as BeamSequence[]).map((s) => s.runnableSteps()));
  }

  /**
   * Beam-search steps back to back in the addon (member i's beams from row bases[i]), which chooses
   * each step's beams and moves their slots; each search then replays the steps' continuations here
   * (the hypotheses are kept here), and the beams it chooses must be the addon's. Each step is
   * replayed as the addon hands it on, while the next one runs (stepwise).
   */
  private async decodeBeams(tokens: number[], bases: readonly number[], lengths: number[], sourceLengths: number[] | undefined, maxSteps: number): Promise<void> {
    const members = this.members as BeamSequence[];
    const groups = members.map((s, i) => s.runGroup(bases[i]!));
    const rows = tokens.length;
    padRows(this.fixedRows, tokens, lengths, sourceLengths);
    const width = tokens.length;
    /** A step: row r's continuations at offset + r of `sampled`, its parent at offset + r of `parents`. */
    type BeamStep = { sampled: NativeSampled; parents: Int32Array; offset: number };
    const out = await this.stepwise<NativeBeamRun, BeamStep>(
      rows,
      (onStep) => this.decoder.decodeBeams(Int32Array.from(tokens), Int32Array.from(lengths), groups, maxSteps, sourceLengths && Int32Array.from(sourceLengths), (k, sampled, parents) => onStep(k, { sampled, parents, offset: 0 })),
      (run, k) => ({ sampled: run, parents: run.parents, offset: k * width }),
      (_, { sampled, parents, offset }) => {
        members.forEach((s, i) => {
          // A search that ended (or was cancelled) before the addon's run stopped takes no more steps.
          if (s.finished || s.cancelled) return;
          const base = offset + bases[i]!;
          const chosen = s.stepContinuations((r) => sampledTop(sampled, base + r));
          if (chosen.some((p, b) => p !== parents[base + b]! - bases[i]!)) {
            const addon = Array.from(parents.subarray(base, base + s.rows), (p) => p - bases[i]!);
            throw new ChorusError('CHORUS_INTERNAL', `the native beam run chose beams [${addon.join(', ')}] where the beam search chooses [${chosen.join(', ')}]`);
          }
        });
      },
    );
    this.lengths = this.lengths.map((n) => n + out.steps);
  }

  /** Greedy steps back to back in the addon; each row takes its tokens until it finishes. */
  private async decodeGreedy(tokens: number[], lengths: number[], sourceLengths: number[] | undefined, steps: number): Promise<void> {
    const members = this.members as Sequence[];
    const rows = tokens.length;
    // Up to the last token, or to the one before it when the model forces its last (forced_eos).
    const last = (s: Sequence): number => s.params.request_output_len - (this.model.forcedEos === undefined ? 0 : 1);
    const remaining = members.map((s) => last(s) - s.tokensGenerated);
    // Paged: every row runs every step of the run, so no further than the nearest end (the blocks a
    // row may take are its own request's), with the blocks for those steps taken before it.
    const maxSteps = this.paged === undefined ? steps : Math.max(1, Math.min(steps, ...remaining));
    this.growRows(this.lengths.map((n, r) => [r, n + maxSteps]));
    const minLeft = members.map((s) => Math.max(0, s.params.min_length - s.tokensGenerated));
    padRows(this.fixedRows, tokens, lengths, sourceLengths, remaining, minLeft);
    const width = tokens.length;
    // Each step's tokens are taken as the step ends (stepwise), so that streams flow while the run goes
    // on. A row that stopped runs along to the end of the run (its slot past what it took is written
    // over next), so a row stopping while others go on ends the run, and the next one goes on without it.
    const taken = members.map(() => 0);
    await this.stepwise<{ tokens: Int32Array; steps: number }, Int32Array>(
      rows,
      (onStep) =>
        this.decoder.decodeGreedy(
          Int32Array.from(tokens),
          Int32Array.from(lengths),
          Int32Array.from(remaining),
          Int32Array.from(this.model.endIds),
          maxSteps,
          sourceLengths && Int32Array.from(sourceLengths),
          minLeft.some((n) => n > 0) ? Int32Array.from(minLeft) : undefined,
          onStep,
        ),
      (run, k) => run.tokens.subarray(k * width, (k + 1) * width),
      (k, ids, live) => {
        let stopped = false;
        let going = false;
        members.forEach((s, r) => {
          if (taken[r]! >= remaining[r]! || s.finished) return;
          s.accept({ token: ids[r]!, logProb: 0 });
          taken[r]!++;
          if (s.finished || taken[r]! >= remaining[r]!) stopped = true;
          else going = true;
        });
        if (stopped && going && live && k + 1 < maxSteps) this.decoder.interrupt();
      },
    );
    members.forEach((_, r) => (this.lengths[r]! += taken[r]!));
  }

  /** Paged: rows [row, tokens] hold blocks for their tokens, and the addon has the table. */
  private growRows(rows: ReadonlyArray<readonly [number, number]>): void {
    const paged = this.paged;
    if (paged === undefined) return;
    for (const [row, tokens] of rows) paged.grow(row, tokens);
    if (paged.changed) this.decoder.setBlockTable(paged.table());
  }

  /**
   * An addon run whose steps also come through its onStep while it goes on (decodeGreedy,
   * decodeBeams): `take(k, step, live)` takes each step once and in order, as it comes (live) or, for
   * those that had not come when the run returns, from the run's result (`stepOf`); each is counted as
   * it is taken, since a request's last step may end it before the run returns. onStep is called from
   * the addon's thread-safe function, outside these awaits: a failure there interrupts the run and is
   * thrown when it returns, where the engine's loop fails the batch's requests. Calls still queued when
   * the run returns (or fails) are not taken.
   */
  private async stepwise<Run extends { steps: number }, Step>(
    rows: number,
    start: (onStep: (k: number, step: Step) => void) => Promise<Run>,
    stepOf: (run: Run, k: number) => Step,
    take: (k: number, step: Step, live: boolean) => void,
  ): Promise<Run> {
    let delivered = 0;
    let ended = false;
    let failure: { error: unknown } | undefined;
    const taking = (step: Step, live: boolean): void => {
      take(delivered, step, live);
      delivered++;
      this.ledger.counters.decodeSteps++;
      this.ledger.counters.decodedRows += rows;
    };
    const running = start((k, step) => {
      if (ended || failure !== undefined || k !== delivered) return;
      try {
        taking(step, true);
      } catch (error) {
        failure = { error };
        this.decoder.interrupt();
      }
    });
    const run = await running.finally(() => (ended = true));
    if (failure !== undefined) throw failure.error;
    for (let k = delivered; k < run.steps; k++) taking(stepOf(run, k), false);
    return run;
  }
}

/** CPU ranks share the cores: each rank's session takes its part of them (unless intraOpThreads says otherwise). */
function cpuRankThreads(provider: 'cpu' | 'cuda' | undefined, ranks: number): { intraOpThreads?: number } {
  return (provider ?? 'cpu') === 'cpu' && ranks > 1 ? { intraOpThreads: Math.max(1, Math.floor(availableParallelism() / ranks)) } : {};
}

/**
 * How many of the continuous core's joining requests prefill as one, in staging slots of their own: one
 * per 16 slots, a power of two up to 4 (CHORUS_CORE_JOIN_GROUP=1|2|4|8 sets it, to compare).
 */
function joinGroup(slots: number): number {
  const asked = Number(process.env.CHORUS_CORE_JOIN_GROUP);
  if ([1, 2, 4, 8].includes(asked)) return asked;
  return [4, 2, 1].find((n) => n <= Math.max(1, Math.floor(slots / 16)))!;
}

/** The most milliseconds an engine with the continuous core spends on its prefill shapes at load. */
const PREFILL_WARMUP_MS = 3000;

/**
 * The core's batch sizes and prefill shapes come and go with arrivals, and each one's first run is slow
 * (a graph capture 1 to 14 ms, a prefill shape's first run 10 to 15 ms, for GPT-2 on an H100): every
 * batch size's decode step is captured at load, and the prefill shapes run narrowest first for up to
 * PREFILL_WARMUP_MS, not while rows wait (CHORUS_GRAPH_WARMUP=0: on first use). A warm-up that fails
 * (the device's memory) says so and leaves the rest to first use.
 */
async function warmCore(decoder: NativeSlotDecoder, slots: number, graphs: boolean, log: ((line: string) => void) | undefined): Promise<void> {
  const started = performance.now();
  const ms = (from: number, to: number): string => `${Math.round(to - from)} ms`;
  let done = '';
  try {
    if (graphs) {
      for (let rows = 1; rows <= slots; rows++) await decoder.decode(new Int32Array(rows), new Int32Array(rows), new Int32Array(0));
      const failure = decoder.graphFailure;
      done = failure === '' ? `the decode step of 1 to ${slots} rows captured as CUDA graphs in ${ms(started, performance.now())}, ` : `CUDA graphs off (${failure}), `;
    }
    const captured = performance.now();
    const shapes = await decoder.warmCore(PREFILL_WARMUP_MS);
    log?.(`warm-up: ${done}${shapes} prefill shapes in ${ms(captured, performance.now())}`);
  } catch (error) {
    log?.(`warm-up: ${done}stopped after ${ms(started, performance.now())} (${(error as Error).message}); the rest warms on first use`);
  }
}

/** Whether the continuous core can run this engine's requests; when it cannot, logs why (the step loop runs them). */
function continuousAvailable(seq2seq: boolean, paged: boolean, batchInvariant: boolean, log: ((line: string) => void) | undefined): boolean {
  const why = seq2seq ? 'an encoder-decoder' : paged ? 'a paged cache' : batchInvariant ? 'batch-invariant decoding' : undefined;
  if (why !== undefined) log?.(`continuous core: off (the step loop runs ${why})`);
  return why === undefined;
}

/** The rows of a step padded to `fixedRows` (batch-invariant decoding): token 0 at position 0, source 1, each of `zeros` 0. */
function padRows(fixedRows: number | undefined, tokens: number[], lengths: number[], sourceLengths: number[] | undefined, ...zeros: number[][]): void {
  for (let row = tokens.length; row < (fixedRows ?? 0); row++) {
    tokens.push(0);
    lengths.push(0);
    sourceLengths?.push(1);
    for (const list of zeros) list.push(0);
  }
}

/**
 * How a request chooses in a step: the raw argmax; the addon's sampler (from its `at`-th row on, one
 * row, or one per beam); its logits brought here; or not at all, the model forcing its token.
 */
type Choosing = { argmax: Sequence } | { sampled: Sequence; at: number } | { beams: BeamSequence; at: number } | { logits: true } | { forced: true };

/** One step's requests: which rows the sampler takes and which bring their logits. */
class StepPlan {
  readonly logitRows: number[] = [];
  private blank: Float32Array | undefined;
  private readonly sampled: Array<{ row: number; sampler: SamplerRow }> = [];

  /** Plans `s`, whose rows start at `base` (its argmax-only form when it qualifies). */
  add(s: ActiveRequest, base: number, argmax: Sequence | undefined): Choosing {
    if (s.forcing) return { forced: true };
    if (argmax !== undefined) return { argmax };
    const at = this.sampled.length;
    if (s instanceof Sequence) {
      const sampler = s.samplerRow();
      if (sampler !== undefined) {
        this.sampled.push({ row: base, sampler });
        return { sampled: s, at };
      }
    } else if (s instanceof BeamSequence && 2 * s.width <= MAX_TOP_LOGPROBS) {
      const rows = s.samplerRows();
      if (rows !== undefined) {
        rows.forEach((sampler, r) => this.sampled.push({ row: base + r, sampler }));
        return { beams: s, at };
      }
    }
    for (let r = 0; r < s.rows; r++) this.logitRows.push(base + r);
    return { logits: true };
  }

  /** The sampler's rows, packed; undefined when none. */
  sample(): NativeSampleBatch | undefined {
    return this.sampled.length > 0 ? packSamplerRows(this.sampled) : undefined;
  }

  /** Hands `s` its step's result; returns, when its rows change, the row each next row continues. */
  finish(s: ActiveRequest, how: Choosing, base: number, out: SlotStep, vocabSize: number): readonly number[] | undefined {
    // A forced token needs no logits: any row of the vocabulary's size stands in.
    if ('forced' in how) return s.step(() => (this.blank ??= new Float32Array(vocabSize)));
    if ('argmax' in how) {
      how.argmax.accept({ token: out.argmax[base]!, logProb: 0 });
      return undefined;
    }
    if ('sampled' in how) {
      const { choice, top } = sampledChoice(out.sampled, how.at);
      how.sampled.accept(choice, undefined, top);
      return undefined;
    }
    if ('beams' in how) return how.beams.stepContinuations((r) => sampledTop(out.sampled, how.at + r));
    return s.step((r) => {
      const i = this.logitRows.indexOf(base + r);
      return out.logits.subarray(i * vocabSize, (i + 1) * vocabSize);
    });
  }
}
