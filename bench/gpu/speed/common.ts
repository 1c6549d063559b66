/** What the GPU speed scripts share: seeded prompt ids (hf.py and seq2seq_hf.py make the same) and a timer of session runs. */
import ort from 'onnxruntime-node';
import type { CheckpointArch, CheckpointSize } from '../../../src/modelbuild/index.ts';

/** The encoder-decoder shapes of the speed runs (seeded weights; seq2seq_hf.py loads the same checkpoints). */
export const SEQ2SEQ_MODELS: Record<string, { arch: CheckpointArch; size: CheckpointSize }> = {
  't5-small': { arch: 't5', size: 'real' },
  't5-base': { arch: 't5', size: 'base' },
  'bart-large': { arch: 'bart', size: 'large' },
};

/** `count` rows of `length` ids below `modulo`, from the linear congruential stream the Python sides use (seed 777). */
export function seededRows(count: number, length: number, modulo: number): number[][] {
  let state = 777;
  return Array.from({ length: count }, () => Array.from({ length }, () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % modulo));
}

/**
 * Counts the milliseconds spent inside ONNX Runtime's session.run (every session of the process), to
 * split a step between the session and everything else. Concurrent runs add up.
 */
export function timeSessionRuns(): { ms: number } {
  const timer = { ms: 0 };
  const proto = (ort.InferenceSession as unknown as { prototype: ort.InferenceSession }).prototype;
  const original = proto.run;
  proto.run = async function (this: ort.InferenceSession, ...args: Parameters<typeof original>) {
    const started = performance.now();
    try {
      return await original.apply(this, args);
    } finally {
      timer.ms += performance.now() - started;
    }
  } as typeof original;
  return timer;
}

/** The native engine's greedySteps for the speed runs' engine paths that set it (others: the engine's default). */
export const GREEDY_STEPS: Record<string, number> = { 'native-graph-one-step': 1, 'native-graph-runs16': 16 };
