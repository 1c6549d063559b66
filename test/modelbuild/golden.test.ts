import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DecoderSession, Seq2SeqSession } from '../../src/runtime/index.ts';
import { buildGolden, readGolden, type Golden } from '../helpers/golden.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-golden-');

/** Compares logit rows in order; returns the largest difference and checks that every row was used. */
function comparer(golden: Golden, vocabSize: number): { compare: (logits: Float32Array) => void; worst: () => number; done: () => void } {
  let row = 0;
  let worst = 0;
  return {
    compare(logits) {
      const expected = golden.logits[row++]!;
      assert.equal(expected.length, vocabSize);
      for (let i = 0; i < vocabSize; i++) worst = Math.max(worst, Math.abs(logits[i]! - expected[i]!));
    },
    worst: () => worst,
    done: () => assert.equal(row, golden.logits.length) };
}

for (const name of ['t5-tiny', 't5v1_1-tiny', 'ul2-tiny', 'bart-tiny', 'mbart-tiny']) {
  test(`${name}: the built encoder-decoder matches transformers' golden logits (<= 1e-4) and greedy ids`, async () => {
    const golden = readGolden(name);
    const session = await Seq2SeqSession.open(buildGolden(golden, root, name));
    const V = session.vocabSize;
    const start = Number(session.config.decoder_start_token_id);
    const rows = comparer(golden, V);
    for (let p = 0; p < golden.prompts.length; p++) {
      const encoded = await session.encode([golden.prompts[p]!]);
      let out = await session.step(encoded, [[start]]);
      rows.compare(out.logits);
      for (const token of golden.forced[p]!) {
        out = await session.step(encoded, [[token]], out.cache);
        rows.compare(out.logits);
      }
      assert.deepEqual(await session.greedy(golden.prompts[p]!, golden.greedy[p]!.length), golden.greedy[p]);
    }
    rows.done();
    assert.ok(rows.worst() <= 1e-4, `max |diff| ${rows.worst()}`);
    await session.close();
  });
}

for (const name of ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny']) {
  test(`${name}: the built model matches transformers' golden logits (<= 1e-4) and greedy ids`, async () => {
    const golden = readGolden(name);
    const session = await DecoderSession.open(buildGolden(golden, root, name));
    const V = session.vocabSize;
    const rows = comparer(golden, V);
    for (let p = 0; p < golden.prompts.length; p++) {
      let out = await session.run({ inputIds: [golden.prompts[p]!] });
      rows.compare(out.logits.subarray((out.dims[1] - 1) * V));
      for (const token of golden.forced[p]!) {
        out = await session.run({ inputIds: [[token]], cache: out.cache });
        rows.compare(out.logits);
      }
      assert.deepEqual(await session.greedy(golden.prompts[p]!, golden.greedy[p]!.length), golden.greedy[p]);
    }
    rows.done();
    assert.ok(rows.worst() <= 1e-4, `max |diff| ${rows.worst()}`);
    await session.close();
  });
}
