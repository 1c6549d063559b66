import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, makeCheckpoint, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { ROOT } from '../helpers/paths.ts';

/** A golden file written by bench/gpu/parity/hf.py: transformers' outputs for a seeded tiny checkpoint. */
interface Golden {
  arch: CheckpointArch;
  seed: number;
  prompts: number[][];
  forced: number[][];
  greedy: number[][];
  /** Per prompt: the prefill's last position, then each teacher-forced step. */
  logits: number[][];
}

const root = mkdtempSync(join(tmpdir(), 'chorus-golden-'));

for (const name of ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny']) {
  test(`${name}: the built model matches transformers' golden logits (<= 1e-4) and greedy ids`, async () => {
    const golden = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/golden', `${name}.json`), 'utf8')) as Golden;
    const checkpoint = join(root, name);
    makeCheckpoint({ arch: golden.arch, size: 'tiny', seed: golden.seed, out: checkpoint });
    buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
    const session = await DecoderSession.open(`${checkpoint}-onnx`);
    const V = session.vocabSize;
    let row = 0;
    let worst = 0;
    for (let p = 0; p < golden.prompts.length; p++) {
      let out = await session.run({ inputIds: [golden.prompts[p]!] });
      const compare = (logits: Float32Array): void => {
        const expected = golden.logits[row++]!;
        assert.equal(expected.length, V);
        for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs(logits[i]! - expected[i]!));
      };
      compare(out.logits.subarray((out.dims[1] - 1) * V));
      for (const token of golden.forced[p]!) {
        out = await session.run({ inputIds: [[token]], cache: out.cache });
        compare(out.logits);
      }
      assert.deepEqual(await session.greedy(golden.prompts[p]!, golden.greedy[p]!.length), golden.greedy[p]);
    }
    assert.equal(row, golden.logits.length);
    assert.ok(worst <= 1e-4, `max |diff| ${worst}`);
    await session.close();
  });
}
