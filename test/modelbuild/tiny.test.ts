import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { buildModel, makeCheckpoint, readSafetensors, writeSafetensors, type CheckpointArch, type Tensor } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-tiny-');

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

async function built(arch: CheckpointArch, seed = 1): Promise<{ checkpoint: string; session: DecoderSession }> {
  const checkpoint = join(root, `${arch}-${seed}`);
  makeCheckpoint({ arch, size: 'tiny', seed, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });
  return { checkpoint, session: await DecoderSession.open(`${checkpoint}-onnx`) };
}

describe('tiny checkpoints of each architecture', () => {
  for (const arch of ['gpt2', 'llama', 'qwen2'] as const) {
    test(`${arch}: decoding with the cache gives the logits of recomputing the whole sequence`, async () => {
      const { session } = await built(arch);
      const prompt = [5, 17, 99, 200, 3, 42, 7, 300];
      const full = await session.run({ inputIds: [prompt] });
      let step = await session.run({ inputIds: [prompt.slice(0, 3)] });
      const V = session.vocabSize;
      for (let i = 3; i < prompt.length; i++) {
        step = await session.run({ inputIds: [[prompt[i]!]], cache: step.cache });
        const diff = maxAbsDiff(step.logits, full.logits.subarray(i * V, (i + 1) * V));
        assert.ok(diff <= 1e-5, `position ${i}: ${diff}`);
      }
      assert.equal(step.cache.length, prompt.length);
      await session.close();
    });

    test(`${arch}: a left-padded row in a batch gets the logits it gets alone`, async () => {
      const { session } = await built(arch);
      const short = [5, 17, 99, 200];
      const long = [8, 9, 10, 11, 12, 13];
      const batch = await session.run({ inputIds: [[0, 0, ...short], long], attentionMask: [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]] });
      const alone = await session.run({ inputIds: [short] });
      const V = session.vocabSize;
      assert.ok(maxAbsDiff(batch.logits.subarray(5 * V, 6 * V), alone.logits.subarray(3 * V, 4 * V)) <= 1e-5);
      // And the next decode step, through the batched cache.
      const next = await session.run({ inputIds: [[1], [1]], attentionMask: [[0, 0, 1, 1, 1, 1, 1], Array(7).fill(1)], cache: batch.cache });
      const nextAlone = await session.run({ inputIds: [[1]], cache: alone.cache });
      assert.ok(maxAbsDiff(next.logits.subarray(0, V), nextAlone.logits) <= 1e-5);
      await session.close();
    });
  }

  test('make-checkpoint is deterministic in its seed', () => {
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 9, out: join(root, 'a') });
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 9, out: join(root, 'b') });
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 10, out: join(root, 'c') });
    const bytes = (dir: string): Buffer => readFileSync(join(root, dir, 'model.safetensors'));
    assert.ok(bytes('a').equals(bytes('b')));
    assert.ok(!bytes('a').equals(bytes('c')));
  });
});

describe('checkpoint formats', () => {
  test('sharded safetensors build the same model as one file', async () => {
    const { checkpoint, session } = await built('qwen2', 4);
    const tensors = readSafetensors(join(checkpoint, 'model.safetensors'));
    const names = [...tensors.keys()];
    const sharded = join(root, 'sharded');
    mkdirSync(sharded);
    copyFileSync(join(checkpoint, 'config.json'), join(sharded, 'config.json'));
    const halves = [names.slice(0, names.length / 2), names.slice(names.length / 2)];
    const weightMap: Record<string, string> = {};
    halves.forEach((part, i) => {
      const file = `model-0000${i + 1}-of-00002.safetensors`;
      writeSafetensors(join(sharded, file), new Map(part.map((n) => [n, tensors.get(n)!])));
      for (const n of part) weightMap[n] = file;
    });
    writeFileSync(join(sharded, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
    buildModel({ source: sharded, out: `${sharded}-onnx` });
    const shardedSession = await DecoderSession.open(`${sharded}-onnx`);
    const prompt = [[1, 2, 3, 4]];
    assert.deepEqual((await shardedSession.run({ inputIds: prompt })).logits, (await session.run({ inputIds: prompt })).logits);
  });

  test('readSafetensors() reads F16 and BF16 tensors as float32', () => {
    const header = JSON.stringify({ h: { dtype: 'F16', shape: [3], data_offsets: [0, 6] }, b: { dtype: 'BF16', shape: [2], data_offsets: [6, 10] } });
    const data = Buffer.alloc(10);
    [0x3c00, 0xc000, 0x3555].forEach((bits, i) => data.writeUInt16LE(bits, i * 2)); // 1, -2, ~0.33325
    [0x3f80, 0x4049].forEach((bits, i) => data.writeUInt16LE(bits, 6 + i * 2)); // 1, 3.140625
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(header.length));
    const file = join(root, 'mixed.safetensors');
    writeFileSync(file, Buffer.concat([length, Buffer.from(header), data]));
    const tensors = readSafetensors(file);
    assert.deepEqual(Array.from(tensors.get('h')!.data), [1, -2, Math.fround(0.333251953125)]);
    assert.deepEqual(Array.from(tensors.get('b')!.data), [1, 3.140625]);
  });
});

describe('errors, not guesses', () => {
  function brokenCopy(edit: (tensors: Map<string, Tensor>) => void): string {
    const dir = mkdtempSync(join(root, 'broken-'));
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 2, out: dir });
    const tensors = readSafetensors(join(dir, 'model.safetensors'));
    edit(tensors);
    writeSafetensors(join(dir, 'model.safetensors'), tensors);
    return dir;
  }

  test('a deleted tensor fails the build, naming it and its expected shape', () => {
    const dir = brokenCopy((t) => t.delete('model.layers.1.self_attn.k_proj.weight'));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), {
      code: 'CHORUS_FILE_INVALID',
      message: /tensor model\.layers\.1\.self_attn\.k_proj\.weight is missing \(expected shape \[32, 64\]\)/ });
  });

  test('a mis-shaped tensor fails the build, naming it and both shapes', () => {
    const dir = brokenCopy((t) => t.set('model.layers.0.mlp.up_proj.weight', { dims: [172, 32], data: new Float32Array(172 * 32) }));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), {
      message: /tensor model\.layers\.0\.mlp\.up_proj\.weight has shape \[172, 32\], expected \[172, 64\]/ });
  });

  test('an extra tensor fails the build, naming it', () => {
    const dir = brokenCopy((t) => t.set('model.layers.2.input_layernorm.weight', { dims: [64], data: new Float32Array(64) }));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), {
      message: /1 tensor\(s\) not used by the architecture: model\.layers\.2\.input_layernorm\.weight \[64\]/ });
  });

  test('a config the builder cannot honour fails with the field', () => {
    const dir = mkdtempSync(join(root, 'config-'));
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 2, out: dir });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, model_type: 'mamba' }));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { message: /model_type "mamba" is not supported; supported: gpt2, llama, qwen2/ });
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, num_attention_heads: 2 }));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { message: /num_attention_heads 2 is not a multiple of num_key_value_heads 4/ });
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, hidden_size: -64 }));
    assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { message: /config\.json: hidden_size must be a positive integer, got -64/ });
  });
});
