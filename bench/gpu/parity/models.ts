/** The models the parity check compares with Hugging Face, and the inputs it feeds them. */
import { lastValueFrom, toArray } from 'rxjs';
import type { Engine, SamplingParams } from '../../../src/generation/index.ts';
import type { CheckpointArch, CheckpointSize } from '../../../src/modelbuild/index.ts';

export interface ParityModel {
  name: string;
  arch: CheckpointArch;
  size: CheckpointSize;
  seed: number;
  dtype: 'fp32' | 'fp16';
  flavor: 'portable' | 'cuda';
  /** `encode`: the encoder alone (compared with T5EncoderModel); default: the whole model. */
  task?: 'encode';
  /** Where Chorus runs it: fp32 on the CPU (bit-faithful float32), fp16 on CUDA. */
  device: 'cpu' | 'cuda';
  prompts: number;
  forcedSteps: number;
  greedySteps: number;
  /** Tiny models' results become golden fixtures for the CPU test. */
  golden: boolean;
}

export const PARITY_MODELS: ParityModel[] = [
  { name: 'gpt2-124m-fp32', arch: 'gpt2', size: 'real', seed: 1, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'gpt2-124m-fp16', arch: 'gpt2', size: 'real', seed: 1, dtype: 'fp16', flavor: 'portable', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'qwen2-0.5b-fp32', arch: 'qwen2', size: 'real', seed: 2, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'qwen2-0.5b-fp16', arch: 'qwen2', size: 'real', seed: 2, dtype: 'fp16', flavor: 'portable', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'gpt2-124m-fp16-cuda', arch: 'gpt2', size: 'real', seed: 1, dtype: 'fp16', flavor: 'cuda', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'qwen2-0.5b-fp16-cuda', arch: 'qwen2', size: 'real', seed: 2, dtype: 'fp16', flavor: 'cuda', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 't5-small-fp32', arch: 't5', size: 'real', seed: 3, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 't5-v1_1-small-fp32', arch: 't5v1_1', size: 'real', seed: 4, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 't5-encoder-fp32', arch: 't5v1_1', size: 'real', seed: 4, dtype: 'fp32', flavor: 'portable', device: 'cpu', task: 'encode', prompts: 8, forcedSteps: 0, greedySteps: 0, golden: false },
  { name: 'bart-base-fp32', arch: 'bart', size: 'real', seed: 5, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'mbart-shaped-fp32', arch: 'mbart', size: 'real', seed: 6, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'ul2-small-fp32', arch: 'ul2', size: 'real', seed: 8, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 't5-small-fp16', arch: 't5', size: 'real', seed: 3, dtype: 'fp16', flavor: 'portable', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 't5-base-fp16', arch: 't5', size: 'base', seed: 3, dtype: 'fp16', flavor: 'portable', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'bart-large-fp16', arch: 'bart', size: 'large', seed: 5, dtype: 'fp16', flavor: 'portable', device: 'cuda', prompts: 8, forcedSteps: 32, greedySteps: 64, golden: false },
  { name: 'ul2-tiny', arch: 'ul2', size: 'tiny', seed: 18, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 't5-tiny', arch: 't5', size: 'tiny', seed: 14, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 't5v1_1-tiny', arch: 't5v1_1', size: 'tiny', seed: 15, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'bart-tiny', arch: 'bart', size: 'tiny', seed: 16, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'mbart-tiny', arch: 'mbart', size: 'tiny', seed: 17, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'gpt2-tiny', arch: 'gpt2', size: 'tiny', seed: 11, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'llama-tiny', arch: 'llama', size: 'tiny', seed: 12, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'qwen2-tiny', arch: 'qwen2', size: 'tiny', seed: 13, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
];

/** Encoder-decoder architectures: their parity runs encode, then decode from decoder_start_token_id. */
export const SEQ2SEQ_ARCHS: readonly string[] = ['t5', 't5v1_1', 'ul2', 'bart', 'mbart'];

/** Seeded prompts (lengths 4 to 39) and teacher-forced continuation ids, the same on every run. */
export function parityInputs(model: ParityModel, vocabSize: number): { prompts: number[][]; forced: number[][] } {
  let state = model.seed * 7919 + 17;
  const next = (limit: number): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state >>> 8) % limit;
  };
  const prompts = Array.from({ length: model.prompts }, (_, i) => Array.from({ length: 4 + ((i * 5) % 36) }, () => next(vocabSize)));
  const forced = prompts.map(() => Array.from({ length: model.forcedSteps }, () => next(vocabSize)));
  return { prompts, forced };
}

/**
 * 64 streams of mixed prompts, lengths and decoding (greedy, and sampled with a seed each) arriving 2 ms
 * apart (into the engine's slots), against each request run alone: the tokens each gives alone, whatever runs beside it?
 */
export async function mixedStreams(engine: Engine, prompts: number[][]): Promise<{ streamsAlone: number[][]; streamsTogether: number[][] }> {
  const requests = Array.from({ length: 64 }, (_, i) => {
    const prompt = prompts[i % prompts.length]!.slice(0, 4 + ((i * 7) % 30));
    const params: SamplingParams =
      i % 2 === 0 ? { temperature: 0, request_output_len: 8 + ((i * 5) % 57) } : { temperature: 0.8, runtime_top_k: 40, runtime_top_p: 0.9, random_seed: i, request_output_len: 8 + ((i * 3) % 57) };
    return { prompt, params };
  });
  const ids = async (r: (typeof requests)[number]): Promise<number[]> => (await lastValueFrom(engine.submit({ inputIds: r.prompt, params: r.params }).pipe(toArray()))).map((e) => e.token);
  const streamsAlone: number[][] = [];
  for (const r of requests) streamsAlone.push(await ids(r));
  const streamsTogether = await Promise.all(requests.map((r, i) => new Promise<void>((resolve) => setTimeout(resolve, 2 * i)).then(() => ids(r))));
  return { streamsAlone, streamsTogether };
}
