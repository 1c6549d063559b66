/**
 * A stand-in generation engine, to measure and test what runs above the engines (pipelines, the engine
 * client, HTTP) at the native engine's speed without a model. It paces itself as the native engine's
 * continuous core does towards JavaScript: steps fall due every `stepMs` whatever the event loop is
 * doing (steps that fell due while it was busy come together, late, as the core's queued messages
 * would), each step gives every running request one token, requests join at the next step and leave
 * at their length or when cancelled. Requests go through the same ledger, scheduler and sequences as
 * the real engines; only the model is missing: a request's tokens are a real tokenizer's ids of a real
 * text, read from an offset its prompt and seed choose (`standInTokens`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Observable } from 'rxjs';
import { Scheduler, type Engine, type EngineStats, type GenerateRequest, type RequestMetrics, type TokenEvent } from '../../src/generation/index.ts';
import { RequestLedger } from '../../src/generation/core/request-ledger.ts';
import type { ActiveRequest, ModelIds, Sequence } from '../../src/generation/core/sequence.ts';

export interface StandInOptions {
  /** The text's ids: what requests read, each from its own offset, wrapping around. */
  ids: readonly number[];
  vocabSize: number;
  endId?: number;
  /** Milliseconds between steps. */
  stepMs: number;
  maxBatchSize: number;
  /** Default: 1024. */
  maxQueue?: number;
  /** Default: 2048. */
  contextLength?: number;
  onRequestDone?: (metrics: RequestMetrics) => void;
}

/** Where a request with these prompt ids and seed starts reading `length` ids. */
function offsetOf(promptIds: readonly number[], seed: number | bigint, length: number): number {
  let h = Number(BigInt.asUintN(32, BigInt(seed))) ^ 0x9e3779b9;
  for (const id of promptIds) h = Math.imul(h ^ id, 0x01000193) >>> 0;
  return h % length;
}

/** The first `count` tokens the stand-in gives a request of these prompt ids and seed. */
export function standInTokens(ids: readonly number[], promptIds: readonly number[], seed: number | bigint, count: number): number[] {
  const at = offsetOf(promptIds, seed, ids.length);
  return Array.from({ length: count }, (_, i) => ids[(at + i) % ids.length]!);
}

export class StandInEngine implements Engine {
  private readonly ledger: RequestLedger;
  private readonly scheduler: Scheduler<ActiveRequest>;
  private readonly model: ModelIds;
  private readonly offsets = new Map<ActiveRequest, number>();
  /** When the current run of steps started, and the steps taken since. */
  private started = 0;
  private steps = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: StandInOptions) {
    this.ledger = new RequestLedger(options.onRequestDone);
    const contextLength = options.contextLength ?? 2048;
    this.scheduler = new Scheduler({ maxBatchSize: options.maxBatchSize, maxQueue: options.maxQueue ?? 1024, kvTokenBudget: options.maxBatchSize * contextLength, contextLength });
    this.model = { vocabSize: options.vocabSize, endIds: options.endId === undefined ? [] : [options.endId] };
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return this.ledger.submit(
      request,
      this.model,
      (s) => {
        this.scheduler.enqueue(s);
        this.wake();
      },
      () => this.wake(),
    );
  }

  stats(): EngineStats {
    return { ...this.ledger.counters, running: this.scheduler.running.length, waiting: this.scheduler.waiting.length, reservedTokens: this.scheduler.reserved(), cacheTokens: 0 };
  }

  async close(): Promise<void> {
    this.ledger.close();
    for (const s of [...this.scheduler.running, ...this.scheduler.waiting]) s.cancelled = true;
    this.schedule();
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Starts the clock when work comes to an idle engine. */
  private wake(): void {
    if (this.timer !== undefined) return;
    this.started = performance.now();
    this.steps = 0;
    this.timer = setTimeout(() => this.tick(), this.options.stepMs);
  }

  /** Takes every step that fell due, then waits for the next one; stops when nothing runs or waits. */
  private tick(): void {
    const due = Math.floor((performance.now() - this.started) / this.options.stepMs);
    while (this.steps < due) {
      this.steps++;
      if (!this.step()) {
        this.timer = undefined;
        return;
      }
    }
    const next = this.started + (this.steps + 1) * this.options.stepMs - performance.now();
    this.timer = setTimeout(() => this.tick(), Math.max(0, next));
  }

  /** One step: leavers out, waiting requests in, a token for every running one. False when idle. */
  private step(): boolean {
    this.schedule();
    const running = this.scheduler.running;
    if (running.length === 0) return this.scheduler.waiting.length > 0;
    const counters = this.ledger.counters;
    counters.steps++;
    counters.decodeSteps++;
    counters.decodedRows += running.length;
    const { ids } = this.options;
    for (const s of running) {
      if (s.finished || s.cancelled) continue;
      const sequence = s as Sequence;
      const token = ids[(this.offsets.get(s)! + sequence.outputIds.length) % ids.length]!;
      sequence.accept({ token, logProb: 0 }, undefined, sequence.params.top_logprobs > 0 ? [{ token, logProb: 0 }] : undefined);
    }
    return true;
  }

  private schedule(): void {
    const { admitted, left } = this.scheduler.schedule();
    for (const s of left) {
      this.offsets.delete(s);
      this.ledger.report(s);
    }
    const now = performance.now();
    for (const s of admitted) {
      s.admittedAt = now;
      this.offsets.set(s, offsetOf(s.promptIds, s.params.random_seed, this.options.ids.length));
    }
  }
}

/**
 * A repository in `dir` for the stand-in: the GPT-2 tokenizer (tiktoken, bundled), a generate model
 * `stand-in` (its source an empty folder: the stand-in engine takes its place) and its model pipeline
 * `stand-in` (its chat template: the messages' contents, a line each).
 */
export function standInRepository(dir: string, maxBatchSize: number): string {
  for (const sub of ['models', 'pipelines', 'tokenizers', 'stand-in']) mkdirSync(join(dir, sub), { recursive: true });
  writeFileSync(join(dir, 'tokenizers/gpt2.yaml'), 'type: tiktoken\nencoding: gpt2\n');
  writeFileSync(join(dir, 'models/stand-in.yaml'), `engine: generate\nsource: ./stand-in\ntokenizer: gpt2\nmax_batch_size: ${maxBatchSize}\n`);
  writeFileSync(join(dir, 'pipelines/stand-in.yaml'), `model: stand-in\nchat_template: "{% for m in messages %}{{ m.content }}\\n{% endfor %}"\n`);
  return dir;
}
