/**
 * generate: FasterTransformer's tensors in, the engine in the middle, FT's tensors out, growing as
 * tokens come. Each batch row is its own engine request (so rows join the running batch on their own
 * and each keeps its parameters). Outputs, as snapshots, in FT's shapes and datatypes:
 *   output_ids [batch, n, L] INT32: the prompt then the generated ids for a decoder-only model (as FT's
 *     GPT), the generated ids alone for an encoder-decoder (as FT's T5); padded with the end id
 *   sequence_length [batch, n] INT32, finish_reason [batch, n] ('' while running),
 *   cum_log_probs [batch, n] and output_log_probs [batch, n, generated] with is_return_log_probs;
 * n is the most sequences a row returns: num_return_sequences when given, else every beam (FT returns
 * beam_width beams, the best first), else 1.
 */
import { from, last, map, merge, switchMap, tap, type Observable } from 'rxjs';
import { ChorusError } from '../../errors.ts';
import type { SamplingParams, TokenEvent } from '../../generation/index.ts';
import type { LoadedModel } from '../model-store.ts';
import { numbers, perRow, rows, type Element, type Tensor } from '../tensor.ts';
import type { StepImpl, TensorRecord } from './step.ts';

/** Scalar decoding inputs: port -> SamplingParams field (the same FT names). */
const SCALARS = [
  'runtime_top_k', 'runtime_top_p', 'temperature', 'len_penalty', 'repetition_penalty', 'presence_penalty', 'frequency_penalty', 'min_length',
  'beam_width', 'beam_search_diversity_rate', 'random_seed', 'start_id', 'end_id', 'top_p_decay', 'top_p_min', 'num_return_sequences', 'top_logprobs',
] as const;

/** One returned sequence of one row, as it grows. */
interface Track {
  ids: number[];
  logProbs: number[];
  tops: Array<Array<{ token: number; logProb: number }>>;
  cum: number;
  finish: string;
}

export const generateStep: StepImpl = (inputs, context) =>
  inputs.pipe(
    // The prompt tensors are final before generation starts.
    last(),
    switchMap((final) => from(context.store.model(context.target)).pipe(switchMap((model) => run(model, final, context.stream)))),
  );

/**
 * The engine requests of a generate step's inputs: each row's prompt (cut at its input length) and its
 * decoding parameters, its output length fitted to the model's context (or refused, naming both numbers).
 */
export function generateRequests(model: Extract<LoadedModel, { engine: 'generate' }>, inputs: TensorRecord): { prompts: number[][]; params: SamplingParams[] } {
  const ids = inputs.input_ids!;
  const batch = ids.shape[0] ?? 0;
  const lengths = perRow<number>(inputs.input_lengths!, batch, 'input_lengths');
  const outputLen = inputs.request_output_len === undefined ? undefined : perRow<number>(inputs.request_output_len, batch, 'request_output_len');
  const prompts = rows<number>(ids).map((row, r) => {
    const length = lengths[r]!;
    if (!Number.isInteger(length) || length < 0 || length > row.length) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input_lengths[${r}] must be an integer in [0, ${row.length}], got ${length}`, { param: 'input_lengths' });
    return row.slice(0, length);
  });
  // A default length (the request gave none) shrinks to what the context leaves after the prompt.
  // A length the request gave and the context cannot hold is refused, naming both numbers.
  const fitted = outputLen?.map((n, r) => {
    const room = model.outputRoom(prompts[r]!.length);
    if (room < 1) {
      throw new ChorusError('CHORUS_CANNOT_FIT', `the prompt is ${prompts[r]!.length} tokens; model ${model.name} holds ${room + prompts[r]!.length} tokens, prompt and output together`, { param: 'prompt' });
    }
    if (inputs.request_output_len!.isDefault === true) return Math.max(1, Math.min(n, room));
    if (n > room) {
      throw new ChorusError('CHORUS_CANNOT_FIT', `request_output_len (max_tokens) ${n} is more than the ${room} tokens model ${model.name} has room for after a prompt of ${prompts[r]!.length}`, { param: 'request_output_len' });
    }
    return n;
  });
  return { prompts, params: prompts.map((_, r) => rowParams(inputs, r, batch, fitted?.[r])) };
}

function run(model: LoadedModel, inputs: TensorRecord, stream: boolean): Observable<TensorRecord> {
  if (model.engine !== 'generate') throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has engine ${model.engine}; generate steps need engine generate`);
  const { prompts, params } = generateRequests(model, inputs);
  const batch = prompts.length;
  // Sized before the engine checks the parameters: never more than the beams there are (at most 64).
  const returned = Math.max(1, ...params.map((p) => Math.min(Number(p.num_return_sequences ?? 1) || 1, Number(p.beam_width ?? 1) || 1, 64)));
  const withLogProbs = params.some((p) => p.is_return_log_probs === true);
  const tracks: Track[][] = prompts.map(() => Array.from({ length: returned }, () => ({ ids: [], logProbs: [], tops: [], cum: 0, finish: '' })));
  const k = Math.max(0, ...params.map((p) => p.top_logprobs ?? 0));
  const padId = (r: number): number => params[r]!.end_id ?? 0;
  const snapshot = (): TensorRecord => {
    const context = (r: number): number[] => (model.seq2seq ? [] : prompts[r]!);
    const width = Math.max(0, ...tracks.flatMap((row, r) => row.map((t) => context(r).length + t.ids.length)));
    const generated = Math.max(0, ...tracks.flatMap((row) => row.map((t) => t.ids.length)));
    const outIds: Element[] = [];
    const outLengths: Element[] = [];
    const finish: Element[] = [];
    const cum: Element[] = [];
    const perToken: Element[] = [];
    tracks.forEach((row, r) =>
      row.forEach((t) => {
        const full = [...context(r), ...t.ids];
        outIds.push(...full, ...Array<number>(width - full.length).fill(padId(r)));
        outLengths.push(full.length);
        finish.push(t.finish);
        cum.push(t.cum);
        perToken.push(...t.logProbs, ...Array<number>(generated - t.logProbs.length).fill(0));
      }),
    );
    const out: TensorRecord = {
      output_ids: { datatype: 'INT32', shape: [batch, returned, width], data: outIds },
      sequence_length: { datatype: 'INT32', shape: [batch, returned], data: outLengths },
      finish_reason: { datatype: 'BYTES', shape: [batch, returned], data: finish },
    };
    if (k > 0) {
      const topIds: Element[] = [];
      const topValues: Element[] = [];
      for (const row of tracks) {
        for (const t of row) {
          for (let i = 0; i < generated; i++) {
            const top = t.tops[i] ?? [];
            for (let j = 0; j < k; j++) {
              topIds.push(top[j]?.token ?? 0);
              topValues.push(top[j]?.logProb ?? -Infinity);
            }
          }
        }
      }
      out.top_log_prob_ids = { datatype: 'UINT32', shape: [batch, returned, generated, k], data: topIds };
      out.top_log_probs = { datatype: 'FP32', shape: [batch, returned, generated, k], data: topValues };
    }
    if (withLogProbs) {
      out.cum_log_probs = { datatype: 'FP32', shape: [batch, returned], data: cum };
      out.output_log_probs = { datatype: 'FP32', shape: [batch, returned, generated], data: perToken };
    }
    return out;
  };
  const streams = prompts.map((prompt, r) =>
    model.generator.submit({ inputIds: prompt, params: params[r]!, stream }).pipe(
      tap((event: TokenEvent) => {
        const track = tracks[r]![event.sequence ?? 0]!;
        track.ids.push(event.token);
        if (event.logProb !== undefined) track.logProbs.push(event.logProb);
        if (event.topLogProbs !== undefined) track.tops.push(event.topLogProbs);
        if (event.cumLogProb !== undefined) track.cum = event.cumLogProb;
        if (event.finishReason !== undefined) track.finish = event.finishReason;
      }),
    ),
  );
  return merge(...streams).pipe(map(snapshot));
}

/** Row r's decoding parameters from the decoding input tensors present. */
function rowParams(inputs: TensorRecord, r: number, batch: number, outputLen: number | undefined): SamplingParams {
  const params: Record<string, unknown> = outputLen === undefined ? {} : { request_output_len: outputLen };
  for (const field of SCALARS) {
    const t = inputs[field];
    if (t !== undefined) params[field] = perRow<number | bigint>(t, batch, field)[r];
  }
  const logProbs = inputs.is_return_log_probs;
  if (logProbs !== undefined) params.is_return_log_probs = perRow<boolean>(logProbs, batch, 'is_return_log_probs')[r];
  const reset = inputs.top_p_reset_ids;
  if (reset !== undefined) params.top_p_reset_ids = rows<number>(reset)[Math.min(r, (reset.shape[0] ?? 1) - 1)];
  for (const [port, field] of [['bad_words_list', 'bad_words'], ['stop_words_list', 'stop_words']] as const) {
    const list = inputs[port];
    if (list !== undefined) params[field] = wordListRow(list, r, port);
  }
  // FT returns every beam.
  if (params.num_return_sequences === undefined && typeof params.beam_width === 'number') params.num_return_sequences = params.beam_width;
  return params as SamplingParams;
}

/** Row r of an FT word list [batch, 2, L] as phrases of ids. */
function wordListRow(list: Tensor, r: number, port: string): number[][] {
  const [batch, two, width] = list.shape;
  if (list.shape.length !== 3 || two !== 2 || batch === undefined || width === undefined) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${port} must have FT's word-list shape [batch, 2, L], got [${list.shape.join(', ')}]`, { param: port });
  }
  const row = Math.min(r, batch - 1);
  const data = numbers(list, port);
  const ids = data.slice(row * 2 * width, row * 2 * width + width);
  const offsets = data.slice(row * 2 * width + width, (row + 1) * 2 * width).filter((o) => o >= 0);
  return offsets.map((end, i) => ids.slice(i === 0 ? 0 : offsets[i - 1], end));
}
