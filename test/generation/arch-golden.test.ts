/**
 * Golden parity of the newer decoder families with transformers (fixtures made on the GPU host's CPU,
 * float32, eager attention): the built model's logits within 1e-4 and its greedy ids, in both graph
 * flavors, and through ONNX Runtime's GreedySearch; greedy 64 steps from 8 prompts and a 4-beam search, in sequences and scores (1e-4), through
 * the TypeScript engine and the native engine on the CPU, over a cache of slots and a paged one.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { NativeEngine, OrtEngine, type Engine } from '../../src/generation/index.ts';
import { buildModel } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { GreedySearchSession } from '../../src/runtime/index.ts';
import { archFixture, assertEngineMatches, assertSessionMatches, readArchGolden, type ArchGolden } from '../helpers/arch-golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const FAMILIES = ['llama3', 'qwen3', 'phi3'];
const root = scratchDir('chorus-arch-golden-');
const { addon, reason } = loadNative();

/** assertEngineMatches on the engine `opening` gives, closed after. */
async function engineMatches(opening: Promise<Engine>, golden: ArchGolden): Promise<void> {
  const engine = await opening;
  try {
    await assertEngineMatches(engine, golden);
  } finally {
    await engine.close();
  }
}

for (const family of FAMILIES) {
  const golden = readArchGolden(family);
  describe(`${family}: parity with transformers`, { skip: golden === undefined ? `no fixture at ${archFixture(family)}` : false }, () => {
    const portable = join(root, `${family}-portable`);
    const cuda = join(root, `${family}-cuda`);
    before(() => {
      buildModel({ source: archFixture(family), out: portable, greedySearch: true });
      buildModel({ source: archFixture(family), out: cuda, flavor: 'cuda', slotDecoder: true, greedySearch: true });
    });

    test('the portable build: logits within 1e-4, greedy ids equal', () => assertSessionMatches(portable, golden!));
    test('the cuda build, on the CPU: logits within 1e-4, greedy ids equal', () => assertSessionMatches(cuda, golden!));
    test("ONNX Runtime's GreedySearch model, in both flavors: the greedy ids of 8 prompts in one batch", async () => {
      for (const dir of [portable, cuda]) {
        const session = (await GreedySearchSession.open(dir))!;
        const got = await session.run(golden!.prompts, 64);
        await session.close();
        // It stops a row at the config's end id (none for a list of them), where transformers was told not to.
        const cut = (ids: number[]): number[] => (ids.includes(session.endId) ? ids.slice(0, ids.indexOf(session.endId) + 1) : ids);
        got.forEach((ids, p) => assert.deepEqual(ids, cut(golden!.greedy[p]!), `${dir}, prompt ${p}`));
      }
    });
    test('the TypeScript engine: greedy 64 steps from 8 prompts and 4 beams equal', () => engineMatches(OrtEngine.open(portable, { maxBatchSize: 8, greedySearch: false }), golden!));
    test('the native engine over slots: greedy and beams equal', { skip: addon === undefined ? `the native addon: ${reason}` : false }, () =>
      engineMatches(NativeEngine.open(cuda, { maxBatchSize: 8 }), golden!));
    test('the native engine over a paged cache: greedy and beams equal', { skip: addon === undefined ? `the native addon: ${reason}` : false }, () =>
      engineMatches(NativeEngine.open(cuda, { maxBatchSize: 8, pagedCache: true }), golden!));
  });
}
