/**
 * The engine over a built decoder-only model on ONNX Runtime, with continuous batching. Each step first
 * asks the scheduler who leaves and who joins, then either prefills the newly admitted requests together
 * (their first tokens come out of it) or decodes one token for every running request in one batch. The
 * batch's cache is rebuilt only when membership changes, or when a beam-search request's beams move
 * (its rows are then re-gathered from their parents). Each request keeps its own parameters,
 * processors and seeded random stream, so its tokens do not depend on what else is batched.
 *
 * The GreedySearch fast path: when the model directory holds the GreedySearch model (`chorus build
 * --greedy-search`), requests that are not streamed and decode greedily without processors
 * (`deviceGreedyEligible`) run apart, in batches of their own through that model, whose whole decode
 * loop stays inside one ONNX Runtime run (on the GPU with CUDA, the cache never crosses to the host).
 * Their tokens come out together when the batch ends; they are the tokens the step loop would give.
 */
import ort from 'onnxruntime-node';
import type { Observable } from 'rxjs';
import { ChorusError } from '../../errors.ts';
import { readGenerationConfig } from '../../util/end-ids.ts';
import { DecoderSession, GreedySearchSession, positionsFromMask, type ExecutionProviders } from '../../runtime/index.ts';
import { gatherRows, mergeCaches, type BatchCache, type CacheData } from './batch-cache.ts';
import { decoderModel, keptRows, stepMembers } from '../core/batch-rows.ts';
import type { Engine, EngineStats, GenerateRequest, RequestMetrics, TokenEvent } from '../core/engine.ts';
import { RequestLedger } from '../core/request-ledger.ts';
import { Scheduler, type SchedulerLimits } from '../core/scheduler.ts';
import { deviceGreedyEligible, sameEndIds, type ActiveRequest, type ModelIds, type Sequence } from '../core/sequence.ts';
import { TurnLoop } from './turn-loop.ts';

/** Options of `OrtEngine.open`. */
export interface OrtEngineOptions extends Partial<SchedulerLimits> {
  executionProviders?: ExecutionProviders;
  /** Called once per request when it ends (finished or cancelled), with its timings. */
  onRequestDone?: (metrics: RequestMetrics) => void;
  /** Use the directory's GreedySearch model, when it has one, for requests that allow it. Default: true. */
  greedySearch?: boolean;
  /** The ids generation ends at (any of them), in place of the model's. Default: generation_config.json's eos_token_id, else config.json's. */
  endIds?: readonly number[];
}

/** Continuous-batching generation over a DecoderSession. */
export class OrtEngine implements Engine {
  private readonly scheduler: Scheduler<ActiveRequest>;
  /** The requests in the batched cache, in row order (each takes `rows` rows); the scheduler's running ones after a step. */
  private members: ActiveRequest[] = [];
  private cache: BatchCache | undefined;
  /** The step loop: prefills and decode steps until no request runs or waits. */
  private readonly loop = new TurnLoop(
    () => this.run(),
    () => this.scheduler.waiting.length + this.scheduler.running.length > 0,
  );
  private readonly ledger: RequestLedger;
  /** The fast path's own queue and batch (its batches run one at a time, each to its end). */
  private readonly greedyScheduler: Scheduler<Sequence>;
  /** Runs the fast path's batches until its queue is empty. */
  private readonly greedyLoop = new TurnLoop(
    () => this.runGreedy(),
    () => this.greedyScheduler.waiting.length > 0,
  );

  private constructor(
    private readonly session: DecoderSession,
    private readonly greedySession: GreedySearchSession | undefined,
    limits: SchedulerLimits,
    private readonly model: ModelIds,
    onRequestDone: ((metrics: RequestMetrics) => void) | undefined,
  ) {
    this.scheduler = new Scheduler(limits);
    this.greedyScheduler = new Scheduler(limits);
    this.ledger = new RequestLedger(onRequestDone);
  }

  /** Whether this engine has the GreedySearch fast path. */
  get hasGreedySearch(): boolean {
    return this.greedySession !== undefined;
  }

  /** Opens a built model directory. */
  static async open(dir: string, options: OrtEngineOptions = {}): Promise<OrtEngine> {
    const executionProviders = options.executionProviders ?? ['cpu'];
    const session = await DecoderSession.open(dir, { executionProviders });
    let greedy = options.greedySearch === false ? undefined : await GreedySearchSession.open(dir, { executionProviders });
    const { model, context } = decoderModel(session.config, session.vocabSize, readGenerationConfig(dir), options.endIds);
    const limits: SchedulerLimits = {
      maxBatchSize: options.maxBatchSize ?? 16,
      maxQueue: options.maxQueue ?? 1024,
      contextLength: options.contextLength ?? context,
      kvTokenBudget: options.kvTokenBudget ?? 16 * context,
    };
    // The fast path must stop where the step loop does (its operator stops at one end id).
    if (greedy !== undefined && !sameEndIds(greedy.endId === -1 ? [] : [greedy.endId], model.endIds)) {
      await greedy.close();
      greedy = undefined;
    }
    return new OrtEngine(session, greedy, limits, model, options.onRequestDone);
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return this.ledger.submit(request, this.model, (sequence) => {
      if (this.greedySession !== undefined && request.stream === false && deviceGreedyEligible(sequence, this.model)) {
        this.greedyScheduler.enqueue(sequence);
        this.greedyLoop.start();
      } else {
        this.scheduler.enqueue(sequence);
        this.loop.start();
      }
    });
  }

  private async runGreedy(): Promise<void> {
    const scheduler = this.greedyScheduler;
    for (;;) {
      const { admitted, left } = scheduler.schedule();
      for (const s of left) this.ledger.report(s);
      if (admitted.length === 0) break;
      const now = performance.now();
      for (const s of admitted) s.admittedAt = now;
      try {
        const generated = await this.greedySession!.run(
          admitted.map((s) => s.promptIds),
          Math.max(...admitted.map((s) => s.params.request_output_len)),
        );
        this.ledger.counters.greedySearchRuns++;
        this.ledger.counters.greedySearchRows += admitted.length;
        admitted.forEach((s, i) => {
          for (const token of generated[i]!) {
            if (s.cancelled || s.finished) break;
            s.accept({ token, logProb: 0 });
          }
          // A row the model ended early (its end id) has finished above; one cut by the batch cannot be.
          if (!s.finished && !s.cancelled) throw new ChorusError('CHORUS_INTERNAL', `GreedySearch returned ${generated[i]!.length} tokens for a request of ${s.params.request_output_len}`);
        });
      } catch (error) {
        for (const s of admitted) {
          if (s.finished) continue;
          s.finished = true;
          s.subscriber.error(error);
        }
      }
      // Everything admitted has ended: the next schedule() drops it.
      for (const s of admitted) if (!s.finished) s.cancelled = true;
    }
  }

  stats(): EngineStats {
    return {
      running: this.scheduler.running.length + this.greedyScheduler.running.length,
      waiting: this.scheduler.waiting.length + this.greedyScheduler.waiting.length,
      reservedTokens: this.scheduler.reserved() + this.greedyScheduler.reserved(),
      cacheTokens: this.cache === undefined ? 0 : this.cache.length * this.cache.masks.length,
      ...this.ledger.counters,
    };
  }

  async close(): Promise<void> {
    this.ledger.close();
    for (const s of [...this.scheduler.waiting, ...this.scheduler.running, ...this.greedyScheduler.waiting]) s.cancelled = true;
    for (const s of this.greedyScheduler.waiting) this.ledger.report(s);
    await Promise.all([this.loop.idle(), this.greedyLoop.idle()]);
    await this.session.close();
    await this.greedySession?.close();
  }

  private async run(): Promise<void> {
    while (this.scheduler.running.length + this.scheduler.waiting.length > 0) {
      const { admitted, left } = this.scheduler.schedule();
      for (const s of left) this.ledger.report(s);
      const now = performance.now();
      for (const s of admitted) s.admittedAt = now;
      if (left.length > 0) this.dropRows(left);
      try {
        if (admitted.length > 0) await this.prefill(admitted);
        else if (this.members.length > 0) await this.decode();
      } catch (error) {
        for (const s of [...admitted, ...this.members]) {
          s.finished = true;
          s.subscriber.error(error);
        }
        this.members = [];
        this.cache = undefined;
      }
      this.ledger.counters.steps++;
      // Let submissions and cancellations in between steps.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.members = [];
    this.cache = undefined;
  }

  /** Rebuilds the batch without the rows of requests that finished or were cancelled. */
  private dropRows(left: readonly ActiveRequest[]): void {
    const kept = keptRows(this.members, left);
    this.members = kept.members;
    this.cache = this.members.length === 0 || this.cache === undefined ? undefined : gatherRows(this.cache, kept.rows);
  }

  /** Runs the new prompts as one left-padded batch, emits their first tokens, and joins them to the batch. */
  private async prefill(admitted: readonly ActiveRequest[]): Promise<void> {
    const length = Math.max(...admitted.map((s) => s.promptIds.length));
    const masks = admitted.map((s) => [...Array<number>(length - s.promptIds.length).fill(0), ...Array<number>(s.promptIds.length).fill(1)]);
    const inputIds = admitted.map((s) => [...Array<number>(length - s.promptIds.length).fill(0), ...s.promptIds]);
    const out = await this.session.run({ inputIds, attentionMask: masks, lastOnly: true });
    this.ledger.counters.prefillSteps++;
    const V = this.session.vocabSize;
    const sources = stepMembers(admitted, (s, base) => s.step((r) => out.logits.subarray((base + r) * V, (base + r + 1) * V)));
    let joining: BatchCache = { ...this.toHost(out.cache.tensors), length, masks };
    // Beam-search requests spread their prompt's row over their beams.
    if (sources !== undefined) joining = gatherRows(joining, sources);
    this.cache = this.cache === undefined ? joining : mergeCaches(this.cache, joining);
    this.members = [...this.members, ...admitted];
  }

  /** One token for every running row. */
  private async decode(): Promise<void> {
    const cache = this.cache!;
    const masks = cache.masks.map((mask) => [...mask, 1]);
    const out = await this.session.run({
      inputIds: this.members.flatMap((s) => s.lastTokens().map((token) => [token])),
      attentionMask: masks,
      positionIds: masks.map((mask) => [positionsFromMask(mask)[mask.length - 1]!]),
      cache: { tensors: this.toDevice(cache), length: cache.length },
    });
    this.ledger.counters.decodeSteps++;
    this.ledger.counters.decodedRows += masks.length;
    const V = this.session.vocabSize;
    this.cache = { ...this.toHost(out.cache.tensors), length: cache.length + 1, masks };
    const sources = stepMembers(this.members, (s, base) => s.step((r) => out.logits.subarray((base + r) * V, (base + r + 1) * V)));
    if (sources !== undefined) this.cache = gatherRows(this.cache, sources);
  }

  private toHost(tensors: Record<string, ort.Tensor>): Pick<BatchCache, 'tensors' | 'heads' | 'headDim'> {
    return {
      tensors: new Map(Object.entries(tensors).map(([name, tensor]) => [name, tensor.data as CacheData])),
      heads: this.session.numKvHeads,
      headDim: this.session.headDim,
    };
  }

  private toDevice(cache: BatchCache): Record<string, ort.Tensor> {
    const dims = [cache.masks.length, cache.heads, cache.length, cache.headDim];
    const type = this.session.floatType;
    return Object.fromEntries([...cache.tensors].map(([name, data]) => [name, new ort.Tensor(type, data, dims)]));
  }
}
