/**
 * The engine over a built encoder-decoder (T5, BART families). Each request runs the encoder once, then
 * decodes step by step through both caches (the cross-attention one computed on the first step and
 * reused). `decoder_start_token_id` starts the decoder; `forced_bos_token_id` and `forced_eos_token_id`,
 * when the model's generation config (or config) has them, are the first token and the last one the
 * length allows, as transformers' generate does. A beam-search request runs its beams as one batch
 * (they share the encoder output), re-gathering both caches when beams move.
 *
 * Requests are not batched together yet (the merged decoder has no decoder attention mask, so rows of
 * different decoder lengths cannot share a step); their steps interleave, one at a time.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Observable } from 'rxjs';
import { ChorusError } from '../errors.ts';
import { selectCacheRows, selectEncodedRows, Seq2SeqSession, type ExecutionProviders, type Seq2SeqOutput } from '../runtime/index.ts';
import type { Engine, EngineStats, GenerateRequest, RequestMetrics, TokenEvent } from './engine.ts';
import { RequestLedger } from './request-ledger.ts';
import type { ActiveRequest, ModelIds } from './sequence.ts';

/** Options of `Seq2SeqEngine.open`. */
export interface Seq2SeqEngineOptions {
  executionProviders?: ExecutionProviders;
  /** Called once per request when it ends. */
  onRequestDone?: (metrics: RequestMetrics) => void;
}

export class Seq2SeqEngine implements Engine {
  private readonly active = new Set<ActiveRequest>();
  private readonly ledger: RequestLedger;

  private constructor(
    private readonly session: Seq2SeqSession,
    private readonly model: ModelIds,
    onRequestDone: ((metrics: RequestMetrics) => void) | undefined,
  ) {
    this.ledger = new RequestLedger(onRequestDone);
  }

  /** Opens a built encoder-decoder directory. */
  static async open(dir: string, options: Seq2SeqEngineOptions = {}): Promise<Seq2SeqEngine> {
    const session = await Seq2SeqSession.open(dir, { executionProviders: options.executionProviders ?? ['cpu'] });
    if (session.vocabSize === 0) throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} was built with task encode: it has no decoder to generate with`);
    const generationFile = join(dir, 'generation_config.json');
    const generation = existsSync(generationFile) ? (JSON.parse(readFileSync(generationFile, 'utf8')) as Record<string, unknown>) : {};
    const pick = (key: string): number | undefined => {
      const value = generation[key] ?? session.config[key];
      return typeof value === 'number' ? value : undefined;
    };
    const decoderStart = pick('decoder_start_token_id') ?? 0;
    const model: ModelIds = { vocabSize: session.vocabSize, endId: pick('eos_token_id'), forcedBos: pick('forced_bos_token_id'), forcedEos: pick('forced_eos_token_id'), decoderStart };
    return new Seq2SeqEngine(session, model, options.onRequestDone);
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return new Observable<TokenEvent>((subscriber) => {
      let sequence: ActiveRequest;
      try {
        sequence = this.ledger.open(request, subscriber, this.model);
      } catch (error) {
        subscriber.error(error);
        return undefined;
      }
      this.active.add(sequence);
      void this.generate(sequence).catch((error: unknown) => {
        sequence.finished = true;
        subscriber.error(error);
      });
      return () => {
        if (!sequence.finished) sequence.cancelled = true;
      };
    });
  }

  stats(): EngineStats {
    return { running: this.active.size, waiting: 0, reservedTokens: 0, cacheTokens: 0, ...this.ledger.counters };
  }

  async close(): Promise<void> {
    this.ledger.close();
    for (const s of this.active) s.cancelled = true;
    while (this.active.size > 0) await new Promise((resolve) => setImmediate(resolve));
    await this.session.close();
  }

  private async generate(sequence: ActiveRequest): Promise<void> {
    try {
      await new Promise((resolve) => setImmediate(resolve));
      const prompt = await this.session.encode([sequence.promptIds]);
      this.ledger.counters.prefillSteps++;
      let encoded = prompt;
      let out: Seq2SeqOutput = await this.session.step(encoded, [[sequence.decoderStart]]);
      const V = this.session.vocabSize;
      for (;;) {
        if (sequence.cancelled) return;
        const rows = sequence.rows;
        const sources = sequence.step((r) => out.logits.subarray(r * V, (r + 1) * V));
        this.ledger.counters.steps++;
        if (sequence.finished) return;
        // Let other requests' steps, and cancellations, in.
        await new Promise((resolve) => setImmediate(resolve));
        if (sequence.cancelled) return;
        let cache = out.cache;
        if (sources !== undefined && (sources.length !== rows || sources.some((parent, r) => parent !== r))) {
          cache = selectCacheRows(cache, sources);
          if (encoded.mask.length !== sources.length) encoded = selectEncodedRows(prompt, sources.map(() => 0));
        }
        out = await this.session.step(encoded, sequence.lastTokens().map((token) => [token]), cache);
        this.ledger.counters.decodeSteps++;
        this.ledger.counters.decodedRows += sequence.rows;
      }
    } finally {
      this.active.delete(sequence);
      this.ledger.report(sequence);
    }
  }
}
