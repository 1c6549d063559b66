/**
 * The logits pipeline of one request, in the order transformers and FasterTransformer apply it:
 * penalties (repetition, presence, frequency), bad words, minimum length, temperature, top-k, top-p.
 */
import type { ResolvedSamplingParams } from '../sampling-params.ts';
import type { SequenceState } from '../sequence-state.ts';
import { badWords, bannedIds } from './bad-words.ts';
import { frequencyPenalty } from './frequency-penalty.ts';
import { minLength } from './min-length.ts';
import { presencePenalty } from './presence-penalty.ts';
import type { LogitsProcessor } from './processor.ts';
import { repetitionPenalty } from './repetition-penalty.ts';
import { temperature } from './temperature.ts';
import { topK } from './top-k.ts';
import { topP } from './top-p.ts';

export type { LogitsProcessor } from './processor.ts';
export { badWords, frequencyPenalty, minLength, presencePenalty, repetitionPenalty, temperature, topK, topP };
export { nextTopP } from './top-p.ts';

/** The processors a request's parameters call for, in order (min_length bans `endIds`, or the request's end_id); empty when none changes anything. */
export function logitsProcessors(params: ResolvedSamplingParams, vocabSize: number, endIds: readonly number[]): LogitsProcessor[] {
  return [
    repetitionPenalty(params.repetition_penalty),
    presencePenalty(params.presence_penalty),
    frequencyPenalty(params.frequency_penalty),
    badWords(params.bad_words),
    minLength(params.min_length, params.end_id === undefined ? endIds : [params.end_id]),
    temperature(params.temperature),
    topK(params.runtime_top_k, vocabSize),
    topP(params.runtime_top_p, params.top_p_decay < 1),
  ].filter((p): p is LogitsProcessor => p !== undefined);
}

/** Runs the processors over one row of logits. */
export function processLogits(processors: readonly LogitsProcessor[], logits: Float32Array, state: SequenceState): Float32Array {
  return processors.reduce((current, processor) => processor(current, state), logits);
}

/**
 * The ids a step may not choose after `output`, as badWords and minLength mask them (the bad words'
 * last ids; the end ids before min_length): for a sampler that runs where the logits are.
 */
export function bannedAfter(params: Pick<ResolvedSamplingParams, 'bad_words' | 'min_length'>, endIds: readonly number[], output: readonly number[]): number[] {
  const bans = bannedIds(params.bad_words, output);
  if (output.length < params.min_length) bans.push(...endIds);
  return bans;
}
