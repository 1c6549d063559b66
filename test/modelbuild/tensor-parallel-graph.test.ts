/**
 * The ranks' graphs compute the unsplit model: the ranks' slot decoders, their collectives replaced
 * by a Sum and a Concat in one ONNX model (test/helpers/tensor-parallel.ts), give the unsplit slot
 * decoder's logits on ONNX Runtime's CPU provider, for a prefill and a decode step.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import ort from 'onnxruntime-node';
import { buildModel, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { simulatedRanks, tinyCheckpoint } from '../helpers/tensor-parallel.ts';

const root = scratchDir('chorus-tp-graph-');
const MAX_LENGTH = 16;

interface Shape {
  layers: number;
  kvHeads: number;
  headDim: number;
}

/** Zero caches for each layer, named with `prefix`. */
function caches(shape: Shape, batch: number, prefix = ''): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (let i = 0; i < shape.layers; i++) {
    for (const part of ['key', 'value']) {
      const dims = [batch, shape.kvHeads, MAX_LENGTH, shape.headDim];
      feeds[`${prefix}past_key_values.${i}.${part}`] = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b)), dims);
    }
  }
  return feeds;
}

/** A step's inputs: `ids` [batch, seq] at positions from `past`. */
function stepInputs(ids: number[][], past: number): Record<string, ort.Tensor> {
  const [batch, seq] = [ids.length, ids[0]!.length];
  const positions = ids.flatMap(() => Array.from({ length: seq }, (_, j) => BigInt(past + j)));
  return {
    input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.flat().map(BigInt)), [batch, seq]),
    position_ids: new ort.Tensor('int64', BigInt64Array.from(positions), [batch, seq]),
    seqlens_k: new ort.Tensor('int32', Int32Array.from(ids.map(() => past + seq - 1)), [batch]),
    total_sequence_length: new ort.Tensor('int32', Int32Array.of(past + seq), []),
  };
}

/** Runs a prefill then a decode step, feeding each present back as the past; the logits of both. */
async function prefillAndDecode(session: ort.InferenceSession, pasts: Record<string, ort.Tensor>): Promise<{ logits: Float32Array[]; others: Float32Array[][] }> {
  const logits: Float32Array[] = [];
  const others: Float32Array[][] = [];
  let feeds = { ...pasts };
  for (const [ids, past] of [[[[5, 17, 99, 200], [8, 9, 10, 11]], 0], [[[3], [250]], 4]] as const) {
    const out = await session.run({ ...feeds, ...stepInputs(ids.map((row) => [...row]), past) });
    logits.push(out.logits!.data as Float32Array);
    others.push(Object.keys(out).filter((k) => /^r[1-9]\d*:logits$/.test(k)).map((k) => out[k]!.data as Float32Array));
    feeds = Object.fromEntries(Object.keys(pasts).map((name) => [name, out[name.replace('past_key_values', 'present')]!]));
  }
  return { logits, others };
}

const cases: Array<[CheckpointArch, number, number?]> = [['llama', 2], ['qwen2', 4], ['qwen3', 2], ['phi3', 2], ['gemma2', 2], ['gpt2', 2], ['llama', 4, 509]];
for (const [arch, n, vocab] of cases) {
  test(`tiny ${arch}${vocab === undefined ? '' : ` (vocabulary ${vocab})`}: the ${n} ranks' slot decoders, summed where they all-reduce, give the unsplit logits (fp32)`, async () => {
    const source = tinyCheckpoint(arch, join(root, `${arch}-${vocab ?? 'source'}`), vocab);
    const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, number>;
    // GPT-2's slot decoder through GroupQueryAttention: ONNX Runtime's CPU provider runs it without the addon.
    const options = { source, flavor: 'cuda' as const, slotDecoder: true, ...(arch === 'gpt2' ? { slotAttention: 'GroupQueryAttention' as const } : {}) };
    const [one, split] = [join(root, `${arch}-${vocab}-1`), join(root, `${arch}-${vocab}-${n}`)];
    buildModel({ ...options, out: one });
    buildModel({ ...options, out: split, tensorParallel: n });
    const heads = config.num_attention_heads ?? config.n_head!;
    const kvHeads = config.num_key_value_heads ?? heads;
    const shape = { layers: config.num_hidden_layers ?? config.n_layer!, kvHeads, headDim: config.head_dim ?? (config.hidden_size ?? config.n_embd!) / heads };
    const whole = await ort.InferenceSession.create(join(one, 'onnx', 'decoder_model_slots.onnx'));
    const ranks = await ort.InferenceSession.create(simulatedRanks(split, n));
    try {
      const expected = await prefillAndDecode(whole, caches(shape, 2));
      const rankKv = { ...shape, kvHeads: kvHeads % n === 0 ? kvHeads / n : 1 };
      const pasts = Object.assign({}, ...Array.from({ length: n }, (_, r) => caches(rankKv, 2, `r${r}:`))) as Record<string, ort.Tensor>;
      const actual = await prefillAndDecode(ranks, pasts);
      expected.logits.forEach((want, step) => {
        const got = actual.logits[step]!;
        assert.equal(got.length, want.length);
        let diff = 0;
        for (let i = 0; i < want.length; i++) diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
        assert.ok(diff < 1e-4, `step ${step}: max |diff| ${diff}`);
        for (const other of actual.others[step]!) assert.deepEqual(other, got, 'every rank has the same logits');
      });
    } finally {
      await whole.release();
      await ranks.release();
    }
  });
}
