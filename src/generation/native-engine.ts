/**
 * The engine over the native addon (src/native): continuous batching like OrtEngine, but the cache
 * never leaves the device. Each running row owns a slot of the SlotDecoder's preallocated cache (rows
 * 0..n-1 are slots 0..n-1); a step sends only the rows' last tokens and lengths (and, for rows that
 * sample, their parameters) and gets back each row's chosen token. Greedy rows take the argmax where the
 * logits are; sampling rows with their penalties, bans, temperature, top-k and top-p run the addon's
 * sampler there (src/native/sampling.h, the processors' twin) with a draw from the request's own
 * stream, and its top_logprobs; each beam of a beam search (up to 10 beams) gets its 2 x beam_width best
 * continuations from the sampler's beam mode, and BeamSearch goes on from those. Only wider beam
 * searches and tokens a model forces bring their rows' logits to the host, where the TypeScript
 * processors run as in OrtEngine. A request is
 * prefilled alone into the next free slot; when requests leave, the rows behind them move down, and
 * when a beam search reorders its beams, their slots are permuted on the device.
 *
 * Sessions and copies run on libuv's worker threads: the event loop never waits on the GPU.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Observable } from 'rxjs';
import { ChorusError } from '../errors.ts';
import { SLOT_DECODER_MODEL } from '../modelbuild/greedy-layout.ts';
import { loadNative, MAX_TOP_LOGPROBS, type NativeAddon, type NativeSampleBatch, type NativeSlotDecoder, type SlotStep } from '../native/index.ts';
import { decoderModel, keptRows, stepMembers } from './batch-rows.ts';
import { BeamSequence } from './beam-sequence.ts';
import type { Engine, EngineStats, GenerateRequest, RequestMetrics, TokenEvent } from './engine.ts';
import { RequestLedger } from './request-ledger.ts';
import { Scheduler, type SchedulerLimits } from './scheduler.ts';
import { packSamplerRows, sampledChoice } from './native-sampler.ts';
import type { SamplerRow } from './sampler.ts';
import { deviceGreedyEligible, Sequence, type ActiveRequest, type ModelIds } from './sequence.ts';

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
  /** CUDA: replay each batch size's decode step as a captured CUDA graph. Default: false. */
  cudaGraph?: boolean;
  intraOpThreads?: number;
  onRequestDone?: (metrics: RequestMetrics) => void;
}

/** The slot decoder's shape, from chorus_build.json. */
interface BuiltSpec {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
}

/** What chorus_build.json says of a directory, as far as the native engine needs it. */
interface BuildInfo {
  dtype: 'fp32' | 'fp16';
  spec: BuiltSpec;
  slotDecoder?: boolean;
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
  if (info?.slotDecoder !== true) return { unavailable: `${dir} has no slot decoder (build it with chorus build --flavor cuda --slot-decoder)` };
  return { addon, info };
}

/** Continuous batching over the native SlotDecoder. */
export class NativeEngine implements Engine {
  private readonly scheduler: Scheduler<ActiveRequest>;
  private readonly ledger: RequestLedger;
  /** The requests in the slots, in row order (each takes `rows` consecutive rows). */
  private members: ActiveRequest[] = [];
  /** Tokens in each row's slot. */
  private lengths: number[] = [];
  private loop: Promise<void> | undefined;

  private constructor(
    private readonly decoder: NativeSlotDecoder,
    limits: SchedulerLimits,
    private readonly model: ModelIds,
    onRequestDone: ((metrics: RequestMetrics) => void) | undefined,
  ) {
    this.scheduler = new Scheduler(limits);
    this.ledger = new RequestLedger(onRequestDone);
  }

  /** Opens a model directory built with the slot decoder; fails, saying why, when the addon or the model is missing. */
  static async open(dir: string, options: NativeEngineOptions = {}): Promise<NativeEngine> {
    const native = nativeFor(dir);
    if (native.unavailable !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', native.unavailable, { param: 'engine' });
    const { addon, info } = native;
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const { model, context } = decoderModel(config, info.spec.vocabSize);
    const slotLength = options.slotLength ?? Math.min(context, 2048);
    if (!Number.isInteger(slotLength) || slotLength < 2 || slotLength > context) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `slotLength must be an integer from 2 to the model's context ${context}, not ${slotLength}`, { param: 'slotLength' });
    }
    const slots = options.maxBatchSize ?? 16;
    const limits: SchedulerLimits = {
      maxBatchSize: slots,
      maxQueue: options.maxQueue ?? 1024,
      contextLength: Math.min(options.contextLength ?? slotLength, slotLength),
      kvTokenBudget: Math.min(options.kvTokenBudget ?? slots * slotLength, slots * slotLength),
    };
    const decoder = new addon.SlotDecoder({
      model: join(dir, 'onnx', SLOT_DECODER_MODEL),
      provider: options.provider ?? 'cpu',
      deviceId: options.deviceId ?? 0,
      slots,
      maxLength: slotLength,
      layers: info.spec.numLayers,
      kvHeads: info.spec.numKvHeads,
      headDim: info.spec.headDim,
      vocab: info.spec.vocabSize,
      dtype: info.dtype,
      ...(options.intraOpThreads === undefined ? {} : { intraOpThreads: options.intraOpThreads }),
      ...(options.cudaOptions === undefined ? {} : { cudaOptions: options.cudaOptions }),
      cudaGraph: options.cudaGraph ?? false,
    });
    await decoder.load();
    return new NativeEngine(decoder, limits, model, options.onRequestDone);
  }

  /** Bytes of the preallocated cache. */
  get cacheBytes(): number {
    return this.decoder.cacheBytes;
  }

  /** Where the time went (milliseconds so far): inside ONNX Runtime's runs, and inside the addon's calls in all. */
  profile(): { sessionMs: number; nativeMs: number } {
    return { sessionMs: this.decoder.sessionMs, nativeMs: this.decoder.callMs };
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return this.ledger.submit(request, this.model, (sequence) => {
      this.scheduler.enqueue(sequence);
      this.startLoop();
    });
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
    await this.loop;
    this.decoder.close();
  }

  /** Starts the step loop unless it runs (a turn later, so requests submitted together start together). */
  private startLoop(): void {
    this.loop ??= new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.run())
      .finally(() => {
        this.loop = undefined;
        if (this.scheduler.waiting.length + this.scheduler.running.length > 0) this.startLoop();
      });
  }

  private async run(): Promise<void> {
    while (this.scheduler.running.length + this.scheduler.waiting.length > 0) {
      const { admitted, left } = this.scheduler.schedule();
      for (const s of left) this.ledger.report(s);
      const now = performance.now();
      for (const s of admitted) s.admittedAt = now;
      try {
        if (left.length > 0) await this.dropRows(left);
        if (admitted.length > 0) await this.prefill(admitted);
        else if (this.members.length > 0) await this.decode();
      } catch (error) {
        for (const s of [...admitted, ...this.members]) {
          if (s.finished) continue;
          s.finished = true;
          s.subscriber.error(error);
        }
        this.members = [];
        this.lengths = [];
      }
      this.ledger.counters.steps++;
      // Let submissions and cancellations in between steps.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.members = [];
    this.lengths = [];
  }

  /** The request when its tokens are the raw argmax (its logits can stay on the device), else undefined. */
  private argmaxOnly(s: ActiveRequest): Sequence | undefined {
    return deviceGreedyEligible(s, this.model) ? s : undefined;
  }

  /** Rows j of the next layout continue rows sources[j]: their slots move there on the device. */
  private async moveRows(sources: readonly number[]): Promise<void> {
    const from: number[] = [];
    const to: number[] = [];
    const lengths: number[] = [];
    sources.forEach((source, row) => {
      if (source === row) return;
      from.push(source);
      to.push(row);
      lengths.push(this.lengths[source]!);
    });
    if (from.length > 0) await this.decoder.copySlots(Int32Array.from(from), Int32Array.from(to), Int32Array.from(lengths));
    this.lengths = sources.map((source) => this.lengths[source]!);
  }

  /** Moves the rows behind requests that left down into their slots. */
  private async dropRows(left: readonly ActiveRequest[]): Promise<void> {
    const kept = keptRows(this.members, left);
    this.members = kept.members;
    await this.moveRows(kept.rows);
  }

  /** Prefills each admitted request into the next free slot; its first token comes out of it. */
  private async prefill(admitted: readonly ActiveRequest[]): Promise<void> {
    for (const s of admitted) {
      if (s.cancelled) continue;
      const slot = this.lengths.length;
      const step = new StepPlan();
      const how = step.add(s, 0, this.argmaxOnly(s));
      const out = await this.decoder.prefill(slot, Int32Array.from(s.promptIds), Int32Array.from(step.logitRows), step.sample());
      this.ledger.counters.prefillSteps++;
      this.lengths.push(s.promptIds.length);
      this.members.push(s);
      // A beam search spreads its prompt's row over its beams.
      const next = step.finish(s, how, 0, out, this.model.vocabSize);
      if (next !== undefined) await this.moveRows([...Array(slot).keys(), ...next.map((parent) => slot + parent)]);
    }
  }

  /** One token for every running row. */
  private async decode(): Promise<void> {
    const tokens: number[] = [];
    const step = new StepPlan();
    const plan = new Map<ActiveRequest, Choosing>();
    for (const s of this.members) {
      plan.set(s, step.add(s, tokens.length, this.argmaxOnly(s)));
      tokens.push(...s.lastTokens());
    }
    const out = await this.decoder.decode(Int32Array.from(tokens), Int32Array.from(this.lengths), Int32Array.from(step.logitRows), step.sample());
    this.ledger.counters.decodeSteps++;
    this.ledger.counters.decodedRows += tokens.length;
    this.lengths = this.lengths.map((n) => n + 1);
    const sources = stepMembers(this.members, (s, base) => step.finish(s, plan.get(s)!, base, out, this.model.vocabSize));
    if (sources !== undefined) await this.moveRows(sources);
  }
}

/**
 * How a request chooses in a step: the raw argmax; the addon's sampler (from its `at`-th row on, one
 * row, or one per beam); or its logits brought here.
 */
type Choosing = { argmax: Sequence } | { sampled: Sequence; at: number } | { beams: BeamSequence; at: number } | { logits: true };

/** One step's requests: which rows the sampler takes and which bring their logits. */
class StepPlan {
  readonly logitRows: number[] = [];
  private readonly sampled: Array<{ row: number; sampler: SamplerRow }> = [];

  /** Plans `s`, whose rows start at `base` (its argmax-only form when it qualifies). */
  add(s: ActiveRequest, base: number, argmax: Sequence | undefined): Choosing {
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
    if ('argmax' in how) {
      how.argmax.accept({ token: out.argmax[base]!, logProb: 0 });
      return undefined;
    }
    if ('sampled' in how) {
      const { choice, top } = sampledChoice(out.sampled, how.at);
      how.sampled.accept(choice, undefined, top);
      return undefined;
    }
    if ('beams' in how) return how.beams.stepContinuations((r) => sampledChoice(out.sampled, how.at + r).top);
    return s.step((r) => {
      const i = this.logitRows.indexOf(base + r);
      return out.logits.subarray(i * vocabSize, (i + 1) * vocabSize);
    });
  }
}
