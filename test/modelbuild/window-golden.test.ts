/**
 * Mistral and Gemma 2 against transformers (test/fixtures/arch/<family>, float32, eager attention,
 * windows of 8 that move within the 64 greedy steps): logits within 1e-4 after each prompt and each
 * teacher-forced id, greedy ids and beam searches equal (scores within 1e-4), through the TypeScript
 * engine on the portable build and through the native engine on the CPU: the slot decoder (whose
 * window is GroupQueryAttention's local_window_size) and the paged decoder (the addon's PagedAttention).
 */
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { NativeEngine, OrtEngine } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { archFixture, assertEngineMatches, assertSessionMatches, readArchGolden } from '../helpers/arch-golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-window-golden-');
const { addon, reason } = loadNative();
/** Why the paged decoder cannot run these models here: no addon, or one built before its attention took windows and caps. */
const pagedSkip = addon === undefined ? `the native addon: ${reason}` : 'attendRows' in addon ? false : "this addon build predates PagedAttention's sliding_window and softcap (npm run build:native)";

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
