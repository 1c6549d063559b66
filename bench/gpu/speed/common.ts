/**
 * What the GPU speed scripts share: seeded prompt ids (hf.py and seq2seq_hf.py make the same), the
 * encoder-decoders' checkpoints and builds, a timer of session runs, and the knobs' lists of counts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { buildModel, makeCheckpoint, type CheckpointArch, type CheckpointSize } from '../../../src/modelbuild/index.ts';

/** The encoder-decoder shapes of the speed runs (seeded weights; seq2seq_hf.py loads the same checkpoints). */
export const SEQ2SEQ_MODELS: Record<string, { arch: CheckpointArch; size: CheckpointSize }> = {
  't5-small': { arch: 't5', size: 'real' },
  't5-base': { arch: 't5', size: 'base' },
  'bart-large': { arch: 'bart', size: 'large' },
};

/** The environment variable `name`'s comma-separated positive whole numbers (`fallback` when unset), or an error naming it. */
export function envCounts(name: string, fallback: string): number[] {
  const text = process.env[name] ?? fallback;
  const values = text.split(',').map(Number);
  if (values.some((v) => !Number.isInteger(v) || v < 1)) throw new Error(`${name} must be positive whole numbers separated by commas, got '${text}'`);
  return values;
}

/** `count` rows of `length` ids below `modulo`, from the linear congruential stream the Python sides use (seed 777). */
export function seededRows(count: number, length: number, modulo: number): number[][] {
  let state = 777;
  return Array.from({ length: count }, () => Array.from({ length }, () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % modulo));
}

/**
 * Encoder-decoder `name` of SEQ2SEQ_MODELS under `work`: its seeded checkpoint (`<name>-ckpt`) and its
 * fp16 build with the slot models (`<name>-fp16`), each made once, and its end id.
 */
export function seq2seqModel(work: string, name: string): { checkpoint: string; dir: string; eos: number } {
  const spec = SEQ2SEQ_MODELS[name];
  if (spec === undefined) throw new Error(`unknown model ${name}; known: ${Object.keys(SEQ2SEQ_MODELS).join(', ')}`);
  const checkpoint = join(work, `${name}-ckpt`);
  if (!existsSync(join(checkpoint, 'config.json'))) makeCheckpoint({ ...spec, seed: 1, out: checkpoint });
  const dir = join(work, `${name}-fp16`);
  if (!existsSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))) buildModel({ source: checkpoint, out: dir, dtype: 'fp16', slotDecoder: true });
  const eos = Number((JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8')) as { eos_token_id: number }).eos_token_id);
  return { checkpoint, dir, eos };
}

/** The sources seq2seq_hf.py makes: `count` rows of `length - 1` seeded ids below 30000, then the end id. */
export function seq2seqSources(count: number, length: number, eos: number): number[][] {
  return seededRows(count, length - 1, 30000).map((row) => [...row, eos]);
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
