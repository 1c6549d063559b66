import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, type BuildDtype, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { builtWeights } from '../helpers/onnx-weights.ts';
import { columnBlock, concat, firstRows, graphOf, intAttribute, rankModel, tinyCheckpoint, type Weight, type Weights } from '../helpers/tensor-parallel.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { writeWindowCheckpoint } from '../helpers/window-checkpoint.ts';

const root = scratchDir('chorus-tp-');
const SLOTS = 'decoder_model_slots.onnx';
const PAGED = 'decoder_model_paged.onnx';

function checkpoint(arch: CheckpointArch, name: string, vocab?: number): string {
  return tinyCheckpoint(arch, join(root, name), vocab);
}

/** Builds `source` with the slot decoder (cuda flavor) split in `n`. */
function build(source: string, name: string, n: number, dtype: BuildDtype = 'fp32'): string {
  const out = join(root, name);
  buildModel({ source, out, dtype, flavor: 'cuda', slotDecoder: true, tensorParallel: n });
  return out;
}

/** How each weight of the unsplit slot decoder is split over the ranks. */
function splitOf(name: string): 'columns' | 'rows' | 'vocab' | 'whole' {
  if (/\.(q|k|v|up|gate)\.(weight|bias)$/.test(name)) return 'columns';
  if (/\.(o|down)\.weight$/.test(name)) return 'rows';
  if (/^(embed_tokens|lm_head)\.weight$/.test(name)) return 'vocab';
  return 'whole';
}

/**
 * The ranks' weights of `model` put back together equal the unsplit build's, and each rank holds the
 * same names plus its vocab_start. `kvOf(rank)` is the first KV head a rank keeps when they are
 * replicated (undefined: split).
 */
function assertReassembles(whole: Weights, ranks: Weights[], opts: { vocab: number; headDim: number; kvReplicated?: (rank: number) => number }): void {
  const n = ranks.length;
  const shard = Math.ceil(opts.vocab / n);
  ranks.forEach((rank, r) => {
    // Constants (named const_N) are the graph's own; the rank has one weight more, its vocabulary offset.
    assert.deepEqual([...rank.keys()].filter((k) => !whole.has(k) && !k.startsWith('const')), ['tensor_parallel.vocab_start'], `rank ${r}'s extra weights`);
    assert.equal(rank.get('tensor_parallel.vocab_start')!.bytes.readBigInt64LE(0), BigInt(r * shard));
    assert.deepEqual([...whole.keys()].filter((k) => !rank.has(k) && !k.startsWith('const')), [], `rank ${r} lacks weights`);
  });
  for (const [name, w] of whole) {
    if (name.startsWith('const')) continue;
    const parts = ranks.map((rank) => rank.get(name)!);
    const split = splitOf(name);
    const kv = /\.(k|v)\.(weight|bias)$/.test(name) && opts.kvReplicated !== undefined;
    let joined: Weight;
    if (kv) {
      parts.forEach((p, r) => {
        const expected = p.dims.length === 1 ? { ...p, bytes: w.bytes.subarray(opts.kvReplicated!(r) * opts.headDim * 4, (opts.kvReplicated!(r) + 1) * opts.headDim * 4) } : columnBlock(w, opts.kvReplicated!(r) * opts.headDim, opts.headDim);
        assert.ok(p.bytes.equals(expected.bytes), `${name} of rank ${r} is its KV head`);
      });
      continue;
    }
    if (split === 'whole') {
      parts.forEach((p, r) => assert.ok(p.bytes.equals(w.bytes), `${name} of rank ${r} is whole`));
      continue;
    }
    if (split === 'vocab') {
      parts.forEach((p) => assert.equal(p.dims[0], shard, `${name}: ${shard} rows a rank`));
      const all = concat(parts, 0);
      joined = firstRows(all, opts.vocab);
      assert.ok(all.bytes.subarray(joined.bytes.length).every((b) => b === 0), `${name}: the padding rows are zeros`);
    } else {
      joined = concat(parts, split === 'columns' ? -1 : 0);
    }
    assert.deepEqual(joined.dims, w.dims, `${name} dims`);
    assert.ok(joined.bytes.equals(w.bytes), `${name}: the ranks' shards put together equal the unsplit weight`);
  }
}

/** Each rank's graph: the contract's collectives, heads and shapes. */
function assertRankGraph(dir: string, model: string, opts: { n: number; layers: number; heads: number; kvHeads: number; vocab: number; attention: string }): void {
  const graph = graphOf(dir, model);
  const nodes = graph.node ?? [];
  const reduces = nodes.filter((x) => x.opType === 'AllReduce');
  const gathers = nodes.filter((x) => x.opType === 'AllGather');
  // The embeddings, then attention out and MLP down in each layer.
  assert.equal(reduces.length, 1 + 2 * opts.layers, `${model}: AllReduce nodes`);
  assert.equal(gathers.length, 1, `${model}: one AllGather of the logits`);
  for (const node of [...reduces, ...gathers]) {
    assert.equal(node.domain, 'chorus');
    assert.equal(node.input!.length, 1);
    assert.equal(node.output!.length, 1);
    assert.equal(intAttribute(node, 'world_size'), opts.n);
  }
  const attentions = nodes.filter((x) => x.opType === opts.attention);
  assert.equal(attentions.length, opts.layers);
  for (const node of attentions) {
    assert.equal(intAttribute(node, 'num_heads'), opts.heads / opts.n);
    assert.equal(intAttribute(node, 'kv_num_heads'), opts.kvHeads);
  }
  const dims = (name: string): Array<number | string> => graph[name.startsWith('logits') || name.startsWith('present') ? 'output' : 'input']!.find((v) => v.name === name)!.type!.tensorType!.shape!.dim!.map((d) => (d.dimParam ? d.dimParam : Number(d.dimValue)));
  assert.deepEqual(dims('logits'), ['batch_size', 1, opts.vocab]);
  assert.equal(dims('past_key_values.0.key')[1], opts.kvHeads);
  assert.equal(dims('present.0.value')[1], opts.kvHeads);
  // No attribute names a rank: the ranks' graphs differ in their weights only.
  assert.ok(nodes.every((x) => intAttribute(x, 'rank') === undefined));
}

const cases = [
  { arch: 'llama', n: 2, kv: 2, note: 'KV heads split (8 q, 4 kv)' },
  { arch: 'llama', n: 4, kv: 1, note: 'KV heads split one a rank' },
  { arch: 'qwen2', n: 4, kv: 1, note: 'fewer KV heads than ranks, replicated; q/k/v biases' },
  { arch: 'phi3', n: 2, kv: 1, note: 'fused qkv and gate_up' },
  { arch: 'qwen3', n: 2, kv: 1, note: 'per-head q/k norms replicated' },
  { arch: 'gemma2', n: 2, kv: 1, note: 'bf16, four norms a layer, tied head', dtype: 'bf16' },
] as Array<{ arch: CheckpointArch; n: number; kv: number; note: string; dtype?: BuildDtype }>;

for (const c of cases) {
  test(`tiny ${c.arch} split in ${c.n} (${c.note}): each rank's decoders carry the collectives, and the shards put together are the weights`, () => {
    const source = checkpoint(c.arch, `${c.arch}-${c.n}`);
    const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, number>;
    const one = join(root, `${c.arch}-${c.n}-tp1`);
    buildModel({ source, out: one, dtype: c.dtype ?? 'fp32', flavor: 'cuda', slotDecoder: true });
    const dir = build(source, `${c.arch}-${c.n}-tp`, c.n, c.dtype);
    const heads = config.num_attention_heads!;
    const kvHeads = config.num_key_value_heads!;
    const headDim = config.head_dim ?? config.hidden_size! / heads;
    for (const model of [SLOTS, PAGED]) {
      const ranks = Array.from({ length: c.n }, (_, r) => builtWeights(dir, rankModel(c.n, r, model)));
      const replicated = kvHeads % c.n !== 0 ? (r: number) => Math.floor((r * heads) / c.n / (heads / kvHeads)) : undefined;
      assertReassembles(builtWeights(one, model), ranks, { vocab: config.vocab_size!, headDim, ...(replicated === undefined ? {} : { kvReplicated: replicated }) });
      for (let r = 0; r < c.n; r++) {
        assertRankGraph(dir, rankModel(c.n, r, model), { n: c.n, layers: config.num_hidden_layers!, heads, kvHeads: c.kv, vocab: config.vocab_size!, attention: model === PAGED ? 'PagedAttention' : 'GroupQueryAttention' });
      }
    }
    const info = JSON.parse(readFileSync(join(dir, 'chorus_build.json'), 'utf8')) as { tensor_parallel?: number };
    assert.equal(info.tensor_parallel, c.n);
    assert.equal(existsSync(join(dir, 'onnx', 'decoder_model_merged.onnx')), false, 'no unsplit decoder');
    assert.ok(existsSync(join(dir, 'config.json')));
  });
}

test('GPT-2 with an odd vocabulary split in 2 (fp16): c_attn by heads, biases of c_proj whole, the vocabulary padded with a zero row', () => {
  const source = checkpoint('gpt2', 'gpt2-odd', 509);
  const one = join(root, 'gpt2-odd-tp1');
  buildModel({ source, out: one, dtype: 'fp16', flavor: 'cuda', slotDecoder: true });
  const dir = build(source, 'gpt2-odd-tp2', 2, 'fp16');
  for (const model of [SLOTS, PAGED]) {
    const ranks = [0, 1].map((r) => builtWeights(dir, rankModel(2, r, model)));
    assertReassembles(builtWeights(one, model), ranks, { vocab: 509, headDim: 16 });
    for (const r of [0, 1]) {
      assertRankGraph(dir, rankModel(2, r, model), { n: 2, layers: 2, heads: 4, kvHeads: 2, vocab: 509, attention: model === PAGED ? 'PagedAttention' : 'DecoderSlotAttention' });
      const nodes = graphOf(dir, rankModel(2, r, model)).node!;
      // The gathered 510 columns cut back to 509.
      assert.ok(nodes.some((x) => x.opType === 'Slice' && x.input![0] === nodes.find((y) => y.opType === 'AllGather')!.output![0]));
    }
  }
});

test('splits the shape or the build does not allow are refused by name', () => {
  const llama = checkpoint('llama', 'refuse-llama');
  const refused = (options: Partial<Parameters<typeof buildModel>[0]>, source: string, message: RegExp): void => {
    assert.throws(() => buildModel({ source, out: join(root, 'refused'), flavor: 'cuda', slotDecoder: true, ...options }), message);
  };
  refused({ tensorParallel: 3 }, llama, /tensor_parallel 3 must divide num_heads 8/);
  refused({ tensorParallel: 8 }, llama, /tensor_parallel 8 must divide the intermediate size 172/);
  refused({ tensorParallel: 0 }, llama, /tensor_parallel must be an integer >= 1, got 0/);
  refused({ tensorParallel: 2, weights: 'int8' }, llama, /tensor_parallel 2 takes float weights/);
  refused({ tensorParallel: 2, slotDecoder: false }, llama, /tensor_parallel 2 writes the slot and paged decoders/);
  refused({ tensorParallel: 2, greedySearch: true }, llama, /tensor_parallel 2 has no GreedySearch model/);
  // 6 q heads in 3 groups of 2: a rank's 3 q heads would read parts of two groups.
  const mistral = join(root, 'refuse-mistral');
  writeWindowCheckpoint('mistral', 1, mistral, { num_attention_heads: 6, num_key_value_heads: 3 });
  refused({ tensorParallel: 2 }, mistral, /tensor_parallel 2 does not split num_key_value_heads 3/);
  const t5 = checkpoint('t5', 'refuse-t5');
  refused({ tensorParallel: 2, flavor: 'portable' }, t5, /tensor_parallel 2 covers decoder-only models .*t5 is an encoder-decoder/);
});
