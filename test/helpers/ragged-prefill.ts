/**
 * Ragged prefills of a float16 slot decoder on the CPU, for test/generation/native-prefill.test.ts,
 * which runs raggedPrefill in a process of its own per setting (CHORUS_PREFILL_ONE_RUN and the core's
 * trace are read once a process).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { loadNative, type NativeSlotDecoder } from '../../src/native/index.ts';

/** The prompts' lengths: across a bucket of 32 (33), exactly one (32), and a single token. */
export const RAGGED_LENGTHS = [5, 17, 33, 32, 1];
/** Greedy tokens each prompt takes after its first. */
const STEPS = 10;

/** What raggedPrefill saw: each prompt's ids (the prefill's, then the greedy steps') and first logits. */
export interface RaggedOutcome {
  /** The decoder: every prompt in one ragged prefill, then greedy steps together. */
  together: number[][];
  /** The decoder: each prompt prefilled and stepped alone. */
  alone: number[][];
  logits: number[][];
  aloneLogits: number[][];
  /** warmCore's shapes on a decoder of 4 slots of 100 positions, and whether its answers stayed. */
  warmed: number;
  warmedSame: boolean;
  /** The continuous core: the prompts as requests together, and each alone. */
  core: { together: number[][]; alone: number[][] };
}

/** The prompts of RAGGED_LENGTHS, each its own ids inside `vocab`. */
export function raggedPrompts(vocab: number): Int32Array[] {
  return RAGGED_LENGTHS.map((n, r) => Int32Array.from({ length: n }, (_, i) => (7 * r + 3 * i + 1) % vocab));
}

/** Ragged prefills and greedy steps of the slot decoder built in `dir` (float16), on the CPU. */
export async function raggedPrefill(dir: string): Promise<RaggedOutcome> {
  const { addon, reason } = loadNative();
  if (addon === undefined) throw new Error(`the native addon: ${reason}`);
  const spec = (JSON.parse(readFileSync(join(dir, 'chorus_build.json'), 'utf8')) as { spec: { numLayers: number; numKvHeads: number; headDim: number; vocabSize: number } }).spec;
  const vocab = spec.vocabSize;
  const options = (slots: number, maxLength: number) => ({
    model: join(dir, 'onnx', 'decoder_model_slots.onnx'),
    provider: 'cpu' as const,
    slots,
    maxLength,
    layers: spec.numLayers,
    kvHeads: spec.numKvHeads,
    headDim: spec.headDim,
    vocab,
    dtype: 'fp16' as const,
  });
  const prompts = raggedPrompts(vocab);
  const rows = prompts.length;
  const rowsOf = (logits: Float32Array, count: number): number[][] => Array.from({ length: count }, (_, r) => [...logits.subarray(r * vocab, (r + 1) * vocab)]);
  const greedy = (decoder: NativeSlotDecoder, first: Int32Array, lengths: number[]) =>
    decoder.decodeGreedy(first, Int32Array.from(lengths), new Int32Array(lengths.length).fill(STEPS), new Int32Array(0), STEPS);

  const decoder = new addon.SlotDecoder(options(8, 128));
  await decoder.load();
  const outcome: RaggedOutcome = { together: [], alone: [], logits: [], aloneLogits: [], warmed: 0, warmedSame: false, core: { together: [], alone: [] } };
  try {
    const ragged = await decoder.prefillRagged(0, prompts, Int32Array.from(prompts.keys()));
    const run = await greedy(decoder, ragged.argmax, RAGGED_LENGTHS);
    outcome.together = prompts.map((_, r) => [ragged.argmax[r]!, ...Array.from({ length: run.steps }, (_, k) => run.tokens[k * rows + r]!)]);
    outcome.logits = rowsOf(ragged.logits, rows);
    for (const prompt of prompts) {
      const first = await decoder.prefill(0, prompt, Int32Array.from([0]));
      const alone = await greedy(decoder, first.argmax, [prompt.length]);
      outcome.alone.push([first.argmax[0]!, ...alone.tokens]);
      outcome.aloneLogits.push(...rowsOf(first.logits, 1));
    }
  } finally {
    await decoder.close();
  }

  // The core's warm-up: the admissions' shapes, which leave the decoder's answers as they were.
  const fresh = new addon.SlotDecoder(options(4, 100));
  const warmed = new addon.SlotDecoder(options(4, 100));
  try {
    await Promise.all([fresh.load(), warmed.load()]);
    outcome.warmed = await warmed.warmCore(60_000);
    const answer = async (d: NativeSlotDecoder): Promise<number[]> => [...(await d.prefillRagged(0, prompts.slice(0, 3), new Int32Array(0))).argmax];
    outcome.warmedSame = JSON.stringify(await answer(warmed)) === JSON.stringify(await answer(fresh));
  } finally {
    await Promise.all([fresh.close(), warmed.close()]);
  }

  const engine = await NativeEngine.open(dir, { maxBatchSize: 8, continuous: true });
  try {
    const request = (prompt: Int32Array): Promise<number[]> =>
      lastValueFrom(engine.submit({ inputIds: [...prompt], params: { temperature: 0, request_output_len: STEPS + 1 } }).pipe(toArray())).then((events) => events.map((e) => e.token));
    outcome.core.together = await Promise.all(prompts.map(request));
    for (const prompt of prompts) outcome.core.alone.push(await request(prompt));
  } finally {
    await engine.close();
  }
  return outcome;
}
