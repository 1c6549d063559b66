/**
 * A checkpoint over 2 GiB, built on the CPU: a tiny GPT-2 whose position table is padded to 17M rows
 * (zeros past the 128 the small copy has), stored as BF16. Positions past 128 are never read, so its
 * greedy ids must equal those of the same weights in a small copy. The token embeddings (and the tied
 * head) sit past the 2 GiB mark in the file (safetensors sorts names), so they come from positioned
 * reads beyond it; the position table goes to the external data file as it is read.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, makeCheckpoint, readSafetensors, writeSafetensors, type Tensor } from '../../src/modelbuild/index.ts';
import { encodeFloats } from '../../src/modelbuild/float-bits.ts';
import { argmax, DecoderSession } from '../../src/runtime/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

const GIB = 1024 ** 3;
const BIG_POSITIONS = 17_000_000;

/** `rows` rows of `real` followed by zero rows, as lazy BF16 pieces: a 2 GiB table never held. */
function padded(real: Tensor, rows: number): Tensor {
  const [, width] = real.dims as [number, number];
  const zeros = new Uint8Array(1024 * 1024 * 2 * width);
  return {
    dims: [rows, width],
    get data(): Float32Array {
      throw new Error('the padded table is only written, piece by piece');
    },
    *encoded(type) {
      assert.equal(type, 'bfloat16');
      yield encodeFloats(real.data, type);
      let left = (rows - real.dims[0]!) * width * 2;
      while (left > 0) {
        const n = Math.min(left, zeros.byteLength);
        yield zeros.subarray(0, n);
        left -= n;
      }
    },
  };
}

async function greedyIds(dir: string, prompt: number[], steps: number): Promise<number[]> {
  const session = await DecoderSession.open(dir);
  try {
    const ids: number[] = [];
    let out = await session.run({ inputIds: [prompt] });
    const V = session.vocabSize;
    for (let i = 0; i < steps; i++) {
      const next = argmax(out.logits, out.logits.length - V, V);
      ids.push(next);
      out = await session.run({ inputIds: [[next]], cache: out.cache });
    }
    return ids;
  } finally {
    await session.close();
  }
}

test('a checkpoint over 2 GiB builds in bounded memory and generates what its small copy does', async () => {
  const root = scratchDir('chorus-large-');
  const source = join(root, 'source');
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 5, out: source });
  const tensors = readSafetensors(join(source, 'model.safetensors'));
  const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, unknown>;

  const small = join(root, 'small');
  mkdirSync(small);
  copyFileSync(join(source, 'config.json'), join(small, 'config.json'));
  writeSafetensors(join(small, 'model.safetensors'), tensors, { dtype: 'BF16' });

  const big = join(root, 'big');
  mkdirSync(big);
  writeFileSync(join(big, 'config.json'), JSON.stringify({ ...config, n_positions: BIG_POSITIONS }));
  const bigTensors = new Map(tensors);
  bigTensors.set('transformer.wpe.weight', padded(tensors.get('transformer.wpe.weight')!, BIG_POSITIONS));
  writeSafetensors(join(big, 'model.safetensors'), bigTensors, { dtype: 'BF16' });
  assert.ok(statSync(join(big, 'model.safetensors')).size > 2 * GIB);

  const rssBefore = process.resourceUsage().maxRSS * 1024;
  const built = buildModel({ source: big, out: `${big}-onnx`, dtype: 'fp16' });
  rmSync(big, { recursive: true });
  // The build never held the 2 GiB table (its own peak includes the test's, measured before it).
  assert.ok(built.stats.peakRssBytes < Math.max(rssBefore, 0) + 0.75 * GIB, `peak RSS ${built.stats.peakRssBytes} bytes (before the build: ${rssBefore})`);
  assert.ok(statSync(join(big + '-onnx', 'onnx', 'decoder_model_merged.onnx_data')).size > 2 * GIB);
  assert.ok(statSync(join(big + '-onnx', 'onnx', 'decoder_model_merged.onnx')).size < 1024 * 1024);
  buildModel({ source: small, out: `${small}-onnx`, dtype: 'fp16' });

  const prompt = [5, 17, 99, 200, 3];
  const expected = await greedyIds(`${small}-onnx`, prompt, 8);
  assert.deepEqual(await greedyIds(`${big}-onnx`, prompt, 8), expected);
  rmSync(`${big}-onnx`, { recursive: true });
});
