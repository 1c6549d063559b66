/** The models the parity check compares with Hugging Face, and the inputs it feeds them. */
import type { CheckpointArch, CheckpointSize } from '../../../src/modelbuild/index.ts';

export interface ParityModel {
  name: string;
  arch: CheckpointArch;
  size: CheckpointSize;
  seed: number;
  dtype: 'fp32' | 'fp16';
  flavor: 'portable' | 'cuda';
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
  { name: 'gpt2-tiny', arch: 'gpt2', size: 'tiny', seed: 11, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'llama-tiny', arch: 'llama', size: 'tiny', seed: 12, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
  { name: 'qwen2-tiny', arch: 'qwen2', size: 'tiny', seed: 13, dtype: 'fp32', flavor: 'portable', device: 'cpu', prompts: 2, forcedSteps: 8, greedySteps: 16, golden: true },
];

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
