import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { buildModel, makeCheckpoint, readSafetensors, writeSafetensors } from '../../src/modelbuild/index.ts';
import { Seq2SeqSession } from '../../src/runtime/index.ts';
import { SentencePieceAdapter } from '../../src/tokenizers/index.ts';
import { TOKENIZERS } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-t5-');

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

describe('encoder-decoder builds', () => {
  for (const arch of ['t5', 't5v1_1', 'ul2', 'bart', 'mbart'] as const) {
    test(`${arch}: decoding with both caches gives the logits of recomputing every step`, async () => {
      const checkpoint = join(root, arch);
      makeCheckpoint({ arch, size: 'tiny', seed: 3, out: checkpoint });
      buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
      const session = await Seq2SeqSession.open(`${checkpoint}-onnx`);
      // Two inputs of different lengths, the shorter padded: the encoder mask must keep them apart.
      const encoded = await session.encode([[5, 17, 99, 200, 3, 1], [8, 9, 1, 0, 0, 0]], [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]);
      const decoderIds = [[0, 44, 23, 99, 7], [0, 3, 3, 12, 400]];
      const full = await session.step(encoded, decoderIds);
      let out = await session.step(encoded, decoderIds.map((row) => row.slice(0, 2)));
      const V = session.vocabSize;
      for (let i = 2; i < 5; i++) {
        out = await session.step(encoded, decoderIds.map((row) => [row[i]!]), out.cache);
        for (let b = 0; b < 2; b++) {
          const diff = maxAbsDiff(out.logits.subarray(b * V, (b + 1) * V), full.logits.subarray((b * 5 + i) * V, (b * 5 + i + 1) * V));
          assert.ok(diff <= 1e-5, `row ${b} step ${i}: ${diff}`);
        }
      }
      // The padded row alone, unpadded, gets the same logits.
      const alone = await session.step(await session.encode([[8, 9, 1]]), [decoderIds[1]!]);
      assert.ok(maxAbsDiff(alone.logits, full.logits.subarray(5 * V)) <= 1e-5);
      await session.close();
    });
  }

  test('--task encode builds the encoder alone, from a full checkpoint, with the same hidden states', async () => {
    const checkpoint = join(root, 'encode');
    makeCheckpoint({ arch: 't5v1_1', size: 'tiny', seed: 4, out: checkpoint });
    const full = buildModel({ source: checkpoint, out: `${checkpoint}-full` });
    const encoderOnly = buildModel({ source: checkpoint, out: `${checkpoint}-encoder`, task: 'encode' });
    assert.ok(full.files.includes('onnx/decoder_model_merged.onnx'));
    assert.ok(encoderOnly.files.includes('onnx/encoder_model.onnx') && !encoderOnly.files.includes('onnx/decoder_model_merged.onnx'));
    const a = await Seq2SeqSession.open(`${checkpoint}-full`);
    const b = await Seq2SeqSession.open(`${checkpoint}-encoder`);
    const ids = [[5, 17, 99, 200, 3, 1]];
    const [ha, hb] = [(await a.encode(ids)).hidden, (await b.encode(ids)).hidden];
    assert.deepEqual(hb.dims, [1, 6, 64]);
    assert.deepEqual(hb.data, ha.data);
    await assert.rejects(b.step(await b.encode(ids), [[0]]), /built with task encode: it has no decoder/);
  });

  test('FT\'s T5 sample request runs end to end through a t5-small-shaped model with the real tokenizer', async () => {
    const checkpoint = join(root, 't5-small');
    makeCheckpoint({ arch: 't5', size: 'real', seed: 5, out: checkpoint });
    buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
    const tokenizer = await SentencePieceAdapter.load(`${TOKENIZERS}/t5/spiece.model`, { addEos: true });
    const ids = tokenizer.encode('translate English to German: The house is wonderful.');
    assert.deepEqual(ids, [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1]);
    const session = await Seq2SeqSession.open(`${checkpoint}-onnx`);
    assert.equal(session.vocabSize, 32128);
    const output = await session.greedy(ids, 8);
    // Each greedy id is the argmax of the uncached decoder over the start token and the ids before it.
    const full = await session.step(await session.encode([ids]), [[0, ...output.slice(0, -1)]]);
    const V = session.vocabSize;
    const argmaxAt = (pos: number): number => {
      const row = full.logits.subarray(pos * V, (pos + 1) * V);
      return row.indexOf(Math.max(...row));
    };
    assert.deepEqual(output, output.map((_, pos) => argmaxAt(pos)));
    await session.close();
  });
});

test('--output-attentions adds each encoder layer\'s attention probabilities', async () => {
  const checkpoint = join(root, 'attentions');
  makeCheckpoint({ arch: 't5', size: 'tiny', seed: 6, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx`, task: 'encode', outputAttentions: true });
  const session = await Seq2SeqSession.open(`${checkpoint}-onnx`);
  const encoded = await session.encode([[5, 17, 99, 1], [8, 9, 1, 0]], [[1, 1, 1, 1], [1, 1, 1, 0]]);
  assert.equal(encoded.attentions.length, 2);
  for (const attention of encoded.attentions) {
    assert.deepEqual(attention.dims, [2, 4, 4, 4]);
    const p = attention.data as Float32Array;
    for (let row = 0; row < 2 * 4 * 4; row++) {
      const sum = p[row * 4]! + p[row * 4 + 1]! + p[row * 4 + 2]! + p[row * 4 + 3]!;
      assert.ok(Math.abs(sum - 1) < 1e-5, `row ${row} sums to ${sum}`);
      if (row >= 16) assert.equal(p[row * 4 + 3], 0, 'the padded key of the second input gets no attention');
    }
  }
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 6, out: join(root, 'gpt2') });
  assert.throws(() => buildModel({ source: join(root, 'gpt2'), out: join(root, 'gpt2-onnx'), outputAttentions: true }), { message: 'output attentions applies to encoders' });
  await session.close();
});

test('a T5 checkpoint missing a cross-attention tensor fails the build, naming it', () => {
  const checkpoint = join(root, 'missing');
  makeCheckpoint({ arch: 't5', size: 'tiny', seed: 7, out: checkpoint });
  const tensors = readSafetensors(join(checkpoint, 'model.safetensors'));
  tensors.delete('decoder.block.1.layer.1.EncDecAttention.k.weight');
  writeSafetensors(join(checkpoint, 'model.safetensors'), tensors);
  assert.throws(() => buildModel({ source: checkpoint, out: `${checkpoint}-onnx` }), {
    message: /tensor decoder\.block\.1\.layer\.1\.EncDecAttention\.k\.weight is missing \(expected shape \[64, 64\]\)/ });
});

test('make-checkpoint refuses a size an architecture does not have', () => {
  assert.throws(() => makeCheckpoint({ arch: 'gpt2', size: 'base', seed: 1, out: join(root, 'no') }), {
    message: 'size must be one of tiny, real for gpt2, got "base"' });
});
