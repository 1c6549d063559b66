/** The golden fixtures written by bench/gpu/parity: transformers' outputs for seeded tiny checkpoints. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildModel, makeCheckpoint, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { ROOT } from './paths.ts';

export interface Golden {
  kind?: 'decoder' | 'seq2seq';
  arch: CheckpointArch;
  seed: number;
  prompts: number[][];
  forced: number[][];
  greedy: number[][];
  /**
   * Per prompt: the prefill's last position (decoder-only) or the decoder start step (encoder-decoder),
   * then each teacher-forced step.
   */
  logits: number[][];
}

export function readGolden(name: string): Golden {
  return JSON.parse(readFileSync(join(ROOT, 'test/fixtures/golden', `${name}.json`), 'utf8')) as Golden;
}

/** Rebuilds the golden's checkpoint from its seed under `root`; returns the built model directory. */
export function buildGolden(golden: Golden, root: string, name: string): string {
  const checkpoint = join(root, name);
  makeCheckpoint({ arch: golden.arch, size: 'tiny', seed: golden.seed, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
  return `${checkpoint}-onnx`;
}

/** An id that none of the golden greedy outputs contains: an end id that cannot stop them early. */
export function unusedId(golden: Golden): number {
  const used = new Set(golden.greedy.flat());
  let id = 0;
  while (used.has(id)) id++;
  return id;
}
