/**
 * The native engine's continuous mode: the addon's core thread (src/native/continuous-core.h) steps
 * the decoder back to back, and this side only hands it requests and takes its tokens. Requests join
 * between its steps as the scheduler admits them; each step's tokens come as one message for all rows,
 * and go to their sequences here, where stop words, events and finish reasons are as in the step loop.
 * A request that ends here (a stop word) or is cancelled leaves the core at its next step boundary,
 * the tokens it took meanwhile dropped. Only requests the core chooses exactly as the step loop would
 * run here (`coreTakes`); beam searches, bad words, factual-nucleus sampling and models that force
 * tokens stay with the step loop.
 */
import type { NativeCoreRequest, NativeCoreStep, NativeSlotDecoder } from '../../native/index.ts';
import { seedState } from '../../util/random.ts';
import type { RequestLedger } from '../core/request-ledger.ts';
import type { Scheduler } from '../core/scheduler.ts';
import { argmaxEligible, Sequence, type ActiveRequest, type ModelIds } from '../core/sequence.ts';
import { sampledTop } from './native-sampler.ts';

/** Whether the core runs `s` with exactly the tokens the step loop would give it. */
export function coreTakes(s: ActiveRequest | undefined, model: ModelIds): s is Sequence {
  if (!(s instanceof Sequence)) return false;
  const p = s.params;
  return (
    p.beam_width === 1 &&
    p.bad_words.length === 0 &&
    // top_p stays what it starts at.
    p.top_p_decay === 1 &&
    p.top_p_min <= p.runtime_top_p &&
    model.forcedBos === undefined &&
    model.forcedEos === undefined &&
    model.decoderStart === undefined
  );
}

/** `s` as the core takes it, under `id`. */
export function coreRequest(id: number, s: Sequence, model: ModelIds): NativeCoreRequest {
  const p = s.params;
  // The penalties' pairs before any output: every context id, once, for the repetition penalty.
  const seen = p.repetition_penalty === 1 ? [] : [...new Set(s.contextIds)].flatMap((token) => [token, 0]);
  return {
    id,
    prompt: Int32Array.from(s.promptIds),
    maxTokens: p.request_output_len,
    endIds: Int32Array.from(s.endIds),
    minLength: p.min_length,
    argmax: argmaxEligible(s, model),
    temperature: p.temperature,
    topP: p.runtime_top_p,
    topK: p.runtime_top_k,
    topLogProbs: p.top_logprobs,
    repetition: p.repetition_penalty,
    presence: p.presence_penalty,
    frequency: p.frequency_penalty,
    random: seedState(p.random_seed),
    seen: Int32Array.from(seen),
  };
}

/** The core's run over a decoder: started when work comes, stopped when none of its kind is left. */
export class CoreRunner {
  /** The requests in the core by id, and each one's id. */
  private readonly rows = new Map<number, Sequence>();
  private readonly ids = new Map<ActiveRequest, number>();
  private nextId = 0;
  /** Set while the core runs: ends the run. */
  private done: (() => void) | undefined;
  private failed = false;

  constructor(
    private readonly decoder: NativeSlotDecoder,
    private readonly scheduler: Scheduler<ActiveRequest>,
    private readonly ledger: RequestLedger,
    private readonly model: ModelIds,
  ) {}

  /** Whether the core runs now (submissions then go to `pump`). */
  get running(): boolean {
    return this.done !== undefined;
  }

  /** Runs the core until no request it takes runs or waits at the head of the queue. */
  run(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.failed = false;
      try {
        this.decoder.startCore((step) => this.onStep(step));
      } catch (error) {
        // The core cannot start: the requests it would take fail, saying why, rather than wait.
        for (const s of this.scheduler.waiting) {
          if (!coreTakes(s, this.model)) continue;
          s.finished = true;
          s.cancelled = true;
          s.subscriber.error(error);
        }
        resolve();
        return;
      }
      this.done = resolve;
      this.pump();
    });
  }

  /** Drops the requests that left and hands the core those the scheduler admits; stops when idle. */
  pump(): void {
    if (this.done === undefined) return;
    const { admitted, left } = this.scheduler.schedule((s) => !this.failed && coreTakes(s, this.model));
    for (const s of left) {
      const id = this.ids.get(s);
      if (id !== undefined) {
        // Harmless when the core retired it already (its end id or its length).
        this.decoder.coreCancel(id);
        this.rows.delete(id);
        this.ids.delete(s);
      }
      this.ledger.report(s);
    }
    const now = performance.now();
    for (const s of admitted) {
      s.admittedAt = now;
      const id = this.nextId++;
      try {
        this.decoder.coreSubmit(coreRequest(id, s as Sequence, this.model));
      } catch (error) {
        // Refused (the scheduler's limits keep this from happening): the request fails, the rest go on.
        s.finished = true;
        s.subscriber.error(error);
        continue;
      }
      this.rows.set(id, s as Sequence);
      this.ids.set(s, id);
    }
    if (this.rows.size === 0 && (this.failed || !coreTakes(this.scheduler.waiting[0], this.model))) this.stop();
  }

  /** Cancels every request in the core and stops it (the engine closes). */
  abort(): void {
    for (const s of this.rows.values()) s.cancelled = true;
    this.pump();
  }

  private stop(): void {
    const done = this.done;
    this.done = undefined;
    void this.decoder.stopCore().then(done, done);
  }

  private onStep(step: NativeCoreStep | Error): void {
    if (step instanceof Error) {
      this.failed = true;
      for (const s of this.rows.values()) {
        if (s.finished || s.cancelled) continue;
        s.finished = true;
        s.subscriber.error(step);
      }
      this.pump();
      return;
    }
    const counters = this.ledger.counters;
    counters.steps++;
    if (step.prefill) counters.prefillSteps++;
    else {
      // Rows that joined the run under way were admitted in this step.
      if (step.joined > 0) counters.prefillSteps++;
      counters.decodeSteps++;
      counters.decodedRows += step.ids.length;
    }
    // Every row of the step in one pass over its arrays; the most likely ids only for rows that asked.
    let ended = false;
    const { ids, sampled } = step;
    for (let i = 0; i < ids.length; i++) {
      const s = this.rows.get(ids[i]!);
      if (s === undefined || s.finished || s.cancelled) continue;
      s.accept({ token: sampled.tokens[i]!, logProb: sampled.logProbs[i]! }, undefined, s.params.top_logprobs > 0 ? sampledTop(sampled, i) : undefined);
      ended ||= s.finished;
    }
    if (ended) this.pump();
  }
}
