/**
 * The engine over a built encoder-decoder (T5, BART families). Each request runs the encoder once, then
 * decodes step by step through both caches (the cross-attention one computed on the first step and
 * reused). `decoder_start_token_id` starts the decoder; `forced_bos_token_id` and `forced_eos_token_id`,
 * when the model's generation config (or config) has them, are the first token and the last one the
 * length allows, as transformers' generate does. A beam-search request runs its beams as one batch
 * (they share the encoder output), re-gathering both caches when beams move.
 *
 * Requests submitted together (in one turn of the event loop, up to maxBatchSize rows) run as one
 * cohort: their sources are encoded as one right-padded batch (masked), and their decoder rows step
 * together, every row at the same decoder length (the merged decoder has no decoder attention mask, so
 * rows of different lengths cannot share a step). Rows of requests that end or are cancelled leave the
 * cohort's caches at the next step; later requests form cohorts of their own, whose steps interleave.
 */
import type { Observable } from 'rxjs';
import { ChorusError } from '../../errors.ts';
import { checkedEndIds, endIdsOf, readGenerationConfig } from '../../util/end-ids.ts';
import { selectCacheRows, selectEncodedRows, Seq2SeqSession, type ExecutionProviders, type Seq2SeqOutput } from '../../runtime/index.ts';
import type { Engine, EngineStats, GenerateRequest, RequestMetrics, TokenEvent } from '../core/engine.ts';
import { RequestLedger } from '../core/request-ledger.ts';
import type { ActiveRequest, ModelIds } from '../core/sequence.ts';

/** Options of `Seq2SeqEngine.open`. */
export interface Seq2SeqEngineOptions {
  executionProviders?: ExecutionProviders;
  /** Called once per request when it ends. */
  onRequestDone?: (metrics: RequestMetrics) => void;
  /** Most decoder rows in one cohort (a beam-search request takes beam_width). Default: 16. */
  maxBatchSize?: number;
  /** The ids generation ends at (any of them), in place of the model's. Default: generation_config.json's eos_token_id, else config.json's. */
  endIds?: readonly number[];
}

/**
 * An encoder-decoder's ids from its generation config (else config.json): the decoder's start, the end
 * ids, the forced first and last tokens; and its positions (BART's max_position_embeddings, T5's
 * n_positions). `endIds` (a model definition's end_ids) replaces the end ids.
 */
export function seq2seqModel(dir: string, config: Record<string, unknown>, vocabSize: number, endIds?: readonly number[]): { model: ModelIds; context: number } {
  const generation = readGenerationConfig(dir);
  const pick = (key: string): number | undefined => {
    const value = generation?.[key] ?? config[key];
    return typeof value === 'number' ? value : undefined;
  };
  return {
    model: { vocabSize, endIds: endIds === undefined ? endIdsOf(config, generation, vocabSize) : checkedEndIds(endIds, vocabSize), forcedBos: pick('forced_bos_token_id'), forcedEos: pick('forced_eos_token_id'), decoderStart: pick('decoder_start_token_id') ?? 0 },
    context: Number(config.max_position_embeddings ?? config.n_positions ?? 512),
  };
}

export class Seq2SeqEngine implements Engine {
  private readonly active = new Set<ActiveRequest>();
  private readonly ledger: RequestLedger;
  /** Submitted this turn: the next cohort. */
  private pending: ActiveRequest[] = [];
  private starting = false;

  private constructor(
    private readonly session: Seq2SeqSession,
    private readonly model: ModelIds,
    onRequestDone: ((metrics: RequestMetrics) => void) | undefined,
    private readonly maxBatchSize: number,
  ) {
    this.ledger = new RequestLedger(onRequestDone);
  }

  /** Opens a built encoder-decoder directory. */
  static async open(dir: string, options: Seq2SeqEngineOptions = {}): Promise<Seq2SeqEngine> {
    const session = await Seq2SeqSession.open(dir, { executionProviders: options.executionProviders ?? ['cpu'] });
    if (session.vocabSize === 0) throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} was built with task encode: it has no decoder to generate with`);
    return new Seq2SeqEngine(session, seq2seqModel(dir, session.config, session.vocabSize, options.endIds).model, options.onRequestDone, options.maxBatchSize ?? 16);
  }

  submit(request: GenerateRequest): Observable<TokenEvent> {
    return this.ledger.submit(request, this.model, (sequence) => {
      this.active.add(sequence);
      this.pending.push(sequence);
      this.startCohorts();
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

  /** A turn later, splits what was submitted into cohorts of at most maxBatchSize rows and runs them. */
  private startCohorts(): void {
    if (this.starting) return;
    this.starting = true;
    setImmediate(() => {
      this.starting = false;
      while (this.pending.length > 0) {
        const cohort: ActiveRequest[] = [];
        let rows = 0;
        while (this.pending.length > 0 && (cohort.length === 0 || rows + this.pending[0]!.width <= this.maxBatchSize)) {
          const next = this.pending.shift()!;
          cohort.push(next);
          rows += next.width;
        }
        void this.runCohort(cohort);
      }
    });
  }

  private async runCohort(members: ActiveRequest[]): Promise<void> {
    try {
      let live = members.filter((s) => !s.cancelled);
      if (live.length === 0) return;
      // Right-padded (T5's relative positions and BART's learned ones count from the left), masked.
      const width = Math.max(...live.map((s) => s.promptIds.length));
      const sources = live.map((s) => [...s.promptIds, ...Array<number>(width - s.promptIds.length).fill(0)]);
      const masks = live.map((s) => Array.from({ length: width }, (_, i) => (i < s.promptIds.length ? 1 : 0)));
      const prompts = await this.session.encode(sources, masks);
      this.ledger.counters.prefillSteps++;
      // Row r of the batch reads row encoderRows[r] of the encoder's output.
      let encoderRows = live.map((_, i) => i);
      let encoded = prompts;
      let out: Seq2SeqOutput = await this.session.step(encoded, live.map((s) => [s.decoderStart]));
      const V = this.session.vocabSize;
      for (;;) {
        // Each member consumes its rows' logits; the rows of the next step are where they continue.
        const next: ActiveRequest[] = [];
        const rows: number[] = [];
        let row = 0;
        for (const s of live) {
          const base = row;
          const count = s.rows;
          row += count;
          if (s.cancelled || s.finished) continue;
          const parents = s.step((r) => out.logits.subarray((base + r) * V, (base + r + 1) * V)) ?? Array.from({ length: count }, (_, r) => r);
          this.ledger.counters.steps++;
          if (s.finished || s.cancelled) continue;
          next.push(s);
          for (const parent of parents) rows.push(base + parent);
        }
        live = next;
        if (live.length === 0) return;
        // Let other cohorts' steps, submissions and cancellations in.
        await new Promise((resolve) => setImmediate(resolve));
        let cache = out.cache;
        if (rows.length !== row || rows.some((source, r) => source !== r)) {
          const moved = rows.map((source) => encoderRows[source]!);
          const encoderMoved = moved.length !== encoderRows.length || moved.some((e, r) => e !== encoderRows[r]);
          cache = selectCacheRows(cache, rows, encoderMoved ? 'all' : 'decoder');
          if (encoderMoved) encoded = selectEncodedRows(prompts, moved);
          encoderRows = moved;
        }
        out = await this.session.step(encoded, live.flatMap((s) => s.lastTokens().map((token) => [token])), cache);
        this.ledger.counters.decodeSteps++;
        this.ledger.counters.decodedRows += rows.length;
      }
    } catch (error) {
      for (const s of members) {
        if (s.finished) continue;
        s.finished = true;
        s.subscriber.error(error);
      }
    } finally {
      for (const s of members) {
        this.active.delete(s);
        this.ledger.report(s);
      }
    }
  }
}
