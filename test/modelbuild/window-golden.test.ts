/**
 * Mistral and Gemma 2 against transformers (test/fixtures/arch/<family>, float32, eager attention,
 * windows of 8 that move within the 64 greedy steps): logits within 1e-4 after each prompt and each
 * teacher-forced id, greedy ids and beam searches equal (scores within 1e-4), through the TypeScript
 * engine on the portable build and through the native engine on the CPU: the slot decoder (whose
 * window is GroupQueryAttention's local_window_size) and the paged decoder (the addon's PagedAttention).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { NativeEngine, OrtEngine, type Engine } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { archFixture, engineBeams, engineGreedy, readArchGolden, type ArchGolden } from '../helpers/arch-golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-window-golden-');
const { addon, reason } = loadNative();
/** Why the paged decoder cannot run these models here: no addon, or one built before its attention took windows and caps. */
const pagedSkip = addon === undefined ? `the native addon: ${reason}` : 'attendRows' in addon ? false : "this addon build predates PagedAttention's sliding_window and softcap (npm run build:native)";

/** The built model's logit rows (the prefill's last, then each forced id's) and greedy ids against the golden. */
async function assertSessionMatches(dir: string, golden: ArchGolden): Promise<void> {
  const session = await DecoderSession.open(dir);
  try {
    const V = session.vocabSize;
    let row = 0;
    let worst = 0;
    const compare = (logits: Float32Array): void => {
      const expected = golden.logits[row++]!;
      assert.equal(expected.length, V);
      for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs(logits[i]! - expected[i]!));
    };
    for (const [p, prompt] of golden.prompts.entries()) {
      let out = await session.run({ inputIds: [prompt] });
      compare(out.logits.subarray((out.dims[1] - 1) * V));
      for (const token of golden.forced[p]!) {
        out = await session.run({ inputIds: [[token]], cache: out.cache });
        compare(out.logits);
      }
      assert.deepEqual(await session.greedy(prompt, golden.greedy[p]!.length), golden.greedy[p], `prompt ${p}`);
    }
    assert.equal(row, golden.logits.length);
    assert.ok(worst <= 1e-4, `max |diff| ${worst}`);
  } finally {
    await session.close();
  }
}

/** Every golden greedy run and beam search through `engine`, all submitted at once (rows share batches). */
async function assertEngineMatches(engine: Engine, golden: ArchGolden): Promise<void> {
  const [greedy, beams] = await Promise.all([engineGreedy(engine, golden), Promise.all(golden.beam.map((c) => engineBeams(engine, c)))]);
  greedy.forEach((ids, p) => assert.deepEqual(ids, golden.greedy[p], `greedy, prompt ${p}`));
  golden.beam.forEach((c, i) => {
    const label = `beam case ${i} (beams ${c.num_beams}, length_penalty ${c.length_penalty})`;
    assert.deepEqual(beams[i]!.sequences, c.sequences, label);
    c.scores.forEach((score, j) => assert.ok(Math.abs(beams[i]!.scores[j]! - score) <= 1e-4 * Math.max(1, Math.abs(score)), `${label} score ${j}: ${beams[i]!.scores[j]} vs ${score}`));
  });
}

for (const family of ['mistral', 'gemma2']) {
  const golden = readArchGolden(family);
  describe(`${family} against transformers' golden outputs`, { skip: golden === undefined ? `no fixture at ${archFixture(family)}` : false }, () => {
    const portable = join(root, `${family}-portable`);
    const cuda = join(root, `${family}-cuda`);
    before(() => {
      buildModel({ source: archFixture(family), out: portable });
      buildModel({ source: archFixture(family), out: cuda, flavor: 'cuda', slotDecoder: true });
    });

    test('the portable build: logits within 1e-4 after each prompt and forced id, and the greedy ids', () => assertSessionMatches(portable, golden!));
    test("the cuda flavor on the CPU (the window in GroupQueryAttention's bias): logits within 1e-4, greedy ids", () => assertSessionMatches(cuda, golden!));

    test('the TypeScript engine: greedy ids and beam searches (sequences, order and scores)', async () => {
      const engine = await OrtEngine.open(portable, { maxBatchSize: 8 });
      try {
        await assertEngineMatches(engine, golden!);
      } finally {
        await engine.close();
      }
    });

    test('the native engine on the CPU, slot decoder: greedy ids and beam searches', { skip: addon === undefined ? `the native addon: ${reason}` : false }, async () => {
      const engine = await NativeEngine.open(cuda, { maxBatchSize: 8 });
      try {
        await assertEngineMatches(engine, golden!);
      } finally {
        await engine.close();
      }
    });

    test('the native engine on the CPU, paged cache: greedy ids and beam searches', { skip: pagedSkip }, async () => {
      const engine = await NativeEngine.open(cuda, { maxBatchSize: 8, pagedCache: true, blockSize: 4 });
      try {
        await assertEngineMatches(engine, golden!);
      } finally {
        await engine.close();
      }
    });
  });
}
