/**
 * Beam search over one request, as transformers' `generate(num_beams=B)` runs it (and FasterTransformer's
 * beam_width), ORT-free: the engine hands it one row of logits per live beam and gets back, for each beam
 * of the next step, the row it continues (so the engine can reorder the cache).
 *
 * Each step: temperature, log-softmax, the request's penalties and word filters on the log-probs; add
 * each beam's running score; keep the best 2B continuations over all beams and tokens. A continuation
 * that ends (end id, stop word, or the length limit) among the best B is offered to the finished set,
 * scored sum(log-probs) / generated_length^len_penalty; the finished set keeps the best B. The next
 * beams are the best B continuations that did not end. The search stops when no beam can beat the
 * finished set (`early_stopping` false: judged at the current length; true: as soon as B are finished;
 * 'never': at the best length the penalty allows), or at the length limit.
 *
 * `beam_search_diversity_rate` (arXiv 1611.08562): while choosing the continuations and the next beams,
 * each beam's k-th best continuation (from 0) loses rate * k, so siblings of one parent compete with
 * other parents; the scores kept stay sums of log-probs.
 * Scores are summed in float32, as transformers does, so near-ties break the same way.
 */
import { ChorusError } from '../../errors.ts';
import { logSumExp, topIndices } from '../../util/argmax.ts';
import type { FinishReason } from './engine.ts';
import { badWords, bannedAfter, frequencyPenalty, minLength, presencePenalty, processLogits, repetitionPenalty, temperature, type LogitsProcessor } from './processors/index.ts';
import type { SamplerRow } from './sampler.ts';
import type { ResolvedSamplingParams } from './sampling-params.ts';
import type { SequenceState } from './sequence-state.ts';

/** What transformers adds to a score to take it out of the running. */
const OUT = -1e9;
const f32 = Math.fround;

/**
 * One live beam: its tokens, their log-probs, and the running sum. A beam's arrays are its own: the
 * last of a step's beams to continue a parent takes the parent's arrays over, the others copy them.
 */
interface Beam {
  tokens: number[];
  logProbs: number[];
  /** How often each id occurs in `tokens`: made when a penalty first asks (countsOf), then kept up. */
  counts: Map<number, number> | undefined;
  score: number;
}

function countsOf(beam: Beam): Map<number, number> {
  if (beam.counts === undefined) {
    beam.counts = new Map();
    for (const id of beam.tokens) beam.counts.set(id, (beam.counts.get(id) ?? 0) + 1);
  }
  return beam.counts;
}

/** One finished hypothesis, best first in `BeamSearch.results()`. */
export interface BeamHypothesis {
  tokens: number[];
  /** Each token's log-probability after the request's processors. */
  logProbs: number[];
  /** Sum of `logProbs`. */
  cumLogProb: number;
  /** cumLogProb / tokens.length^len_penalty: what the beams are ranked by. */
  score: number;
  finishReason: FinishReason;
}

/** One continuation of a beam: an id and its log-probability after the processors. */
export interface BeamContinuation {
  token: number;
  logProb: number;
}

/** A continuation considered at one step. */
interface Candidate {
  parent: number;
  token: number;
  logProb: number;
  score: number;
  /** The score it is chosen by (lowered by the diversity rate). */
  rank: number;
  ends: FinishReason | undefined;
}

/** Whether x comes before y among a step's candidates: higher rank, then lower parent, then lower id. */
function ranksBefore(x: Candidate, y: Candidate): boolean {
  if (x.rank !== y.rank) return x.rank > y.rank;
  return x.parent !== y.parent ? x.parent < y.parent : x.token < y.token;
}

/** The processors that apply to log-probs in beam search: sampling filters do not. */
function beamProcessors(params: ResolvedSamplingParams, endIds: readonly number[]): LogitsProcessor[] {
  return [
    repetitionPenalty(params.repetition_penalty),
    presencePenalty(params.presence_penalty),
    frequencyPenalty(params.frequency_penalty),
    badWords(params.bad_words),
    minLength(params.min_length, endIds),
  ].filter((p): p is LogitsProcessor => p !== undefined);
}

/** log-softmax in float32 (as transformers computes it over float32 logits). */
function logSoftmax(logits: Float32Array): Float32Array {
  const norm = logSumExp(logits);
  const out = new Float32Array(logits.length);
  if (norm === -Infinity) return out.fill(-Infinity);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - norm;
  return out;
}

export class BeamSearch {
  readonly width: number;
  private beams: Beam[];
  private finished: BeamHypothesis[] = [];
  private readonly processors: LogitsProcessor[];
  private readonly temperature: LogitsProcessor | undefined;
  private improvable = true;
  done = false;

  constructor(
    /** What the penalties see before the output: the prompt, or an encoder-decoder's decoder start. */
    private readonly contextIds: readonly number[],
    private readonly params: ResolvedSamplingParams,
    /** A hypothesis ends at any of these. */
    private readonly endIds: readonly number[],
  ) {
    this.width = params.beam_width;
    // One real beam to start from; the others cannot be chosen until it has spread.
    this.beams = Array.from({ length: this.width }, (_, i) => ({ tokens: [], logProbs: [], counts: undefined, score: i === 0 ? 0 : OUT }));
    this.processors = beamProcessors(params, endIds);
    this.temperature = params.temperature === 1 ? undefined : temperature(params.temperature);
  }

  /** Tokens generated so far by every live beam (all the same length). */
  get generated(): number {
    return this.beams[0]!.tokens.length;
  }

  /** The last token of each live beam: the next step's input. */
  lastTokens(): number[] {
    return this.beams.map((b) => b.tokens[b.tokens.length - 1]!);
  }

  /**
   * One step. `logitsOf(b)` is beam b's row of raw logits (on the first step every b may give the same
   * row); `forced`: the only token this step may choose (log-prob 0), whatever the processors say.
   * Returns, for each beam of the next step, the beam it continues.
   */
  step(logitsOf: (beam: number) => Float32Array, forced?: number): number[] {
    return this.stepWith((b) => this.continuations(b, logitsOf(b), forced));
  }

  /**
   * Beam b's 2B best continuations from its row of logits, by accumulated score (float32(log-prob +
   * the beam's score)) and then id: what the native sampler's beam mode returns where the logits are.
   */
  continuations(b: number, rawLogits: Float32Array, forced?: number): BeamContinuation[] {
    const beam = this.beams[b]!;
    if (forced !== undefined) return forcedContinuations(forced, 2 * this.width, rawLogits.length);
    const logits = this.temperature ? this.temperature(rawLogits, this.state(beam)) : rawLogits;
    const logProbs = processLogits(this.processors, logSoftmax(logits), this.state(beam));
    const accumulated = new Float32Array(logProbs.length);
    for (let v = 0; v < logProbs.length; v++) accumulated[v] = f32(logProbs[v]! + beam.score);
    return topIndices(accumulated, 2 * this.width).map((token) => ({ token, logProb: logProbs[token]! }));
  }

  /** Beam b's step as a row for the native sampler's beam mode (its processors' inputs and its score). */
  samplerRow(b: number): SamplerRow {
    const beam = this.beams[b]!;
    const p = this.params;
    const seen = new Map<number, number>();
    if (p.repetition_penalty !== 1) for (const id of this.contextIds) seen.set(id, 0);
    if (p.repetition_penalty !== 1 || p.presence_penalty !== 0 || p.frequency_penalty !== 0) for (const [id, count] of countsOf(beam)) seen.set(id, count);
    const bans = bannedAfter(p, this.endIds, beam.tokens);
    return {
      temperature: p.temperature,
      topP: 1,
      topK: 0,
      topLogProbs: 0,
      repetition: p.repetition_penalty,
      presence: p.presence_penalty,
      frequency: p.frequency_penalty,
      uniform: 0,
      seen: Int32Array.from([...seen].flat()),
      bans,
      beamKeep: 2 * this.width,
      beamScore: beam.score,
    };
  }

  /** One step from each live beam's continuations (`continuationsOf(b)`, as `continuations` orders them). */
  stepWith(continuationsOf: (beam: number) => readonly BeamContinuation[]): number[] {
    if (this.done) throw new ChorusError('CHORUS_INTERNAL', 'beam search stepped after it finished');
    const B = this.width;
    const keep = 2 * B;
    const length = this.generated;
    const last = length + 1 >= this.params.request_output_len;
    // The best 2B over all beams: by rank, then by flat index (beam-major), as a stable top-k gives;
    // each continuation goes in where it ranks among the best so far.
    const best: Candidate[] = [];
    for (let b = 0; b < B; b++) {
      const beam = this.beams[b]!;
      // A beam out of the running cannot contribute on the first step: skip the work.
      if (length === 0 && b > 0) continue;
      const continuations = continuationsOf(b);
      for (let k = 0; k < continuations.length; k++) {
        const { token, logProb } = continuations[k]!;
        const score = f32(logProb + beam.score);
        const c: Candidate = { parent: b, token, logProb, score, rank: f32(score - this.params.beam_search_diversity_rate * k), ends: undefined };
        let at = best.length;
        while (at > 0 && ranksBefore(c, best[at - 1]!)) at--;
        if (at < keep) best.splice(at, 0, c);
        if (best.length > keep) best.pop();
      }
    }
    for (const c of best) c.ends = this.ends(this.beams[c.parent]!, c.token, last);

    this.offerFinished(best.slice(0, B), length + 1);
    // The next beams: the best B by rank with those that ended taken out of the running (a stable
    // insertion by that order, so equals keep their order in `best`).
    const order = (c: Candidate): number => (c.ends === undefined ? c.rank : f32(c.rank + OUT));
    const next: Candidate[] = [];
    for (const c of best) {
      let at = next.length;
      while (at > 0 && order(next[at - 1]!) < order(c)) at--;
      next.splice(at, 0, c);
    }
    if (next.length > B) next.length = B;
    const parents = next.map((c) => c.parent);
    // Children of one parent left to make: the last takes its arrays over, after the others copied them.
    const children = new Array<number>(B).fill(0);
    for (const p of parents) children[p]!++;
    this.beams = next.map((c) => {
      const parent = this.beams[c.parent]!;
      const running = c.ends === undefined ? c.score : f32(c.score + OUT);
      const beam: Beam =
        --children[c.parent]! === 0
          ? { tokens: parent.tokens, logProbs: parent.logProbs, counts: parent.counts, score: running }
          : { tokens: parent.tokens.slice(), logProbs: parent.logProbs.slice(), counts: undefined, score: running };
      beam.tokens.push(c.token);
      beam.logProbs.push(c.logProb);
      beam.counts?.set(c.token, (beam.counts.get(c.token) ?? 0) + 1);
      return beam;
    });
    this.judgeImprovement(length + 1);
    const full = this.finished.length === B;
    this.done = !this.improvable || (this.params.early_stopping === true && full) || best.every((c) => c.ends !== undefined);
    return parents;
  }

  /**
   * Whether the native engine's beam runs can step this search (src/native/beam-run.h): past its first
   * step, with processors its sampler's beam mode applies alone (temperature, min_length's ban of the
   * end id; no penalties, bad words or stop words). (The engine bounds the beams: 2 x beam_width
   * continuations per beam must fit the sampler's result.)
   */
  get runnable(): boolean {
    const p = this.params;
    return (
      !this.done &&
      this.generated > 0 &&
      p.repetition_penalty === 1 &&
      p.presence_penalty === 0 &&
      p.frequency_penalty === 0 &&
      p.bad_words.length === 0 &&
      p.stop_words.length === 0
    );
  }

  /** What choosing the next beams needs, for a beam run: the running scores, the finished scores, whether it can still improve. */
  runState(): { generated: number; scores: number[]; finished: number[]; improvable: boolean; endIds: readonly number[] } {
    return { generated: this.generated, scores: this.beams.map((b) => b.score), finished: this.finished.map((h) => h.score), improvable: this.improvable, endIds: this.endIds };
  }

  /** The best `num_return_sequences` finished hypotheses, best first. */
  results(): BeamHypothesis[] {
    return this.finished.slice(0, this.params.num_return_sequences);
  }

  private state(beam: Beam): SequenceState {
    return { promptIds: this.contextIds, outputIds: beam.tokens, outputCounts: countsOf(beam), topP: 1 };
  }

  private ends(beam: Beam, token: number, last: boolean): FinishReason | undefined {
    if (this.endIds.includes(token)) return 'end_id';
    // The beam's tokens and then `token`, read in place.
    const n = beam.tokens.length + 1;
    const at = (i: number): number => (i === n - 1 ? token : beam.tokens[i]!);
    if (this.params.stop_words.some((phrase) => phrase.length <= n && phrase.every((id, i) => at(n - phrase.length + i) === id))) return 'stop';
    return last ? 'length' : undefined;
  }

  /** The top-B continuations that ended join the finished set if they beat its worst. */
  private offerFinished(top: readonly Candidate[], length: number): void {
    const B = this.width;
    if (!this.improvable || (this.params.early_stopping === true && this.finished.length === B)) return;
    const joining = top
      .filter((c) => c.ends !== undefined)
      .map((c): BeamHypothesis => {
        const parent = this.beams[c.parent]!;
        return {
          tokens: [...parent.tokens, c.token],
          logProbs: [...parent.logProbs, c.logProb],
          cumLogProb: c.score,
          score: f32(c.score / length ** this.params.len_penalty),
          finishReason: c.ends!,
        };
      });
    if (joining.length === 0) return;
    // Earlier hypotheses first among equals, as transformers' merge of old and new keeps them.
    this.finished = [...this.finished, ...joining].sort((x, y) => y.score - x.score).slice(0, B);
  }

  /** Can the best live beam still beat the worst finished hypothesis? Once no, it stays no. */
  private judgeImprovement(length: number): void {
    const lp = this.params.len_penalty;
    const hypothetical = this.params.early_stopping === 'never' && lp > 0 ? this.params.request_output_len : length;
    const bestPossible = f32(this.beams[0]!.score / hypothetical ** lp);
    const worst = this.finished.length < this.width ? OUT : Math.min(...this.finished.map((h) => h.score));
    this.improvable &&= bestPossible > worst;
  }
}

/**
 * The continuations of a beam whose next token is forced, as `continuations` finds them in a row that
 * allows only `forced` (log-prob 0, the rest -inf; ties by id), without a row of the vocabulary's size:
 * `forced`, then the lowest other ids.
 */
function forcedContinuations(forced: number, keep: number, vocabSize: number): BeamContinuation[] {
  const out: BeamContinuation[] = [{ token: forced, logProb: 0 }];
  for (let token = 0; out.length < Math.min(keep, vocabSize); token++) if (token !== forced) out.push({ token, logProb: -Infinity });
  return out;
}
