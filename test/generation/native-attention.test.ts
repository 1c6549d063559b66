/**
 * The decoder attention kernels (DecoderSlotAttention's and PagedAttention's, src/native/slot-attention.h
 * and paged-attention.h) with sliding windows and soft-capped scores, against the plain reference of
 * test/helpers/attention-reference.ts: decode steps and prefills of several tokens, grouped-query heads,
 * rows of different lengths, a qkv bias and (paged) rotary embeddings and a shuffled block table. Every
 * cache position a query may not read holds NaN (before the window, past the row's new tokens, whole
 * blocks out of the window mapped to a block of NaN), so a kernel that reads one fails. On the host
 * always (when the addon is built); on the GPU too when one is visible: fp32 against the reference,
 * fp16 and bf16 against the host kernels. Then the operators' sliding_window and softcap attributes
 * through ONNX Runtime, in a tiny GPT-2's slot and paged decoders run by the native engine on the CPU.
 */
import assert from 'node:assert/strict';
import onnxProto from 'onnx-proto';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative, type NativeAttentionCall } from '../../src/native/index.ts';
import { fromBfloat16Bits, fromHalfBits, toHalfBits } from '../../src/util/half.ts';
import { uniformStream } from '../../src/util/random.ts';
import { cacheAt, firstKey, referenceAttention, type Float32Call } from '../helpers/attention-reference.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon } = loadNative();
const skip = addon === undefined ? 'the native addon is not built (npm run build:native)' : false;
const gpu = addon !== undefined && addon.cuda && addon.cudaDevices() > 0;

interface Case {
  name: string;
  op: 'slot' | 'paged';
  tokens: number;
  heads: number;
  kvHeads: number;
  dim: number;
  /** Keys already in each row. */
  past: number[];
  window: number;
  softcap: number;
  scale: number;
  bias?: boolean;
  rotary?: boolean;
  blockSize?: number;
  /** paged: no block table, each row's one block its own (a cache of slots, blockSize = the rows' capacity). */
  slots?: boolean;
  /** paged: q and k heads normed (Qwen3). */
  norms?: boolean;
}

const CASES: Case[] = [
  { name: 'slot decode, window 8', op: 'slot', tokens: 1, heads: 4, kvHeads: 2, dim: 16, past: [0, 9, 30], window: 8, softcap: 0, scale: 0.25 },
  { name: 'slot decode, window 1 (itself alone)', op: 'slot', tokens: 1, heads: 2, kvHeads: 2, dim: 16, past: [5, 17], window: 1, softcap: 0, scale: 0.25 },
  { name: 'slot decode, softcap 1.5', op: 'slot', tokens: 1, heads: 4, kvHeads: 1, dim: 16, past: [3, 20], window: 0, softcap: 1.5, scale: 0.5 },
  { name: 'slot prefill of 5, window 4, softcap 3, bias', op: 'slot', tokens: 5, heads: 4, kvHeads: 2, dim: 8, past: [0, 12], window: 4, softcap: 3, scale: 0.4, bias: true },
  { name: 'paged decode, window 6, rotary, bias', op: 'paged', tokens: 1, heads: 4, kvHeads: 1, dim: 16, past: [2, 13, 27], window: 6, softcap: 0, scale: 0.25, bias: true, rotary: true, blockSize: 4 },
  { name: 'paged prefill of 6, window 5, softcap 2', op: 'paged', tokens: 6, heads: 2, kvHeads: 2, dim: 8, past: [0, 10], window: 5, softcap: 2, scale: 0.5, rotary: true, blockSize: 4 },
  { name: 'paged over slots (no table) decode, rotary, q/k norms', op: 'paged', tokens: 1, heads: 8, kvHeads: 2, dim: 16, past: [0, 11, 29], window: 0, softcap: 0, scale: 0.25, rotary: true, norms: true, slots: true },
  { name: 'paged over slots prefill of 5, rotary, bias, q/k norms, window 4', op: 'paged', tokens: 5, heads: 4, kvHeads: 4, dim: 8, past: [0, 7], window: 4, softcap: 0, scale: 0.5, bias: true, rotary: true, norms: true, slots: true },
  { name: 'paged decode, q/k norms, block table', op: 'paged', tokens: 1, heads: 4, kvHeads: 2, dim: 16, past: [3, 18], window: 0, softcap: 0, scale: 0.25, rotary: true, norms: true, blockSize: 4 },
  { name: 'paged decode, softcap 1, window past the row', op: 'paged', tokens: 1, heads: 8, kvHeads: 2, dim: 16, past: [7, 30], window: 64, softcap: 1, scale: 0.5, blockSize: 8 },
  // Prefills over several tiles of queries and keys (the GPU's tiled prefill kernel: 32 of each).
  { name: 'slot prefill of 70 over three tiles, rows from 0 and 45, 2 heads a key head', op: 'slot', tokens: 70, heads: 4, kvHeads: 2, dim: 64, past: [0, 45], window: 0, softcap: 0, scale: 0.125 },
  { name: 'slot prefill of 40, window 20, softcap 2, bias, 2 heads a key head', op: 'slot', tokens: 40, heads: 2, kvHeads: 1, dim: 32, past: [0, 9, 33], window: 20, softcap: 2, scale: 0.2, bias: true },
  // Rows of up to 291 positions, groups of 1 and 8.
  { name: 'paged decode over three tiles, one head a key head', op: 'paged', tokens: 1, heads: 2, kvHeads: 2, dim: 16, past: [150, 290, 5], window: 0, softcap: 0, scale: 0.25, rotary: true, blockSize: 16 },
  { name: 'paged over slots decode, 8 heads a key head, window 140, softcap 1.5, bias', op: 'paged', tokens: 1, heads: 8, kvHeads: 1, dim: 32, past: [3, 200], window: 140, softcap: 1.5, scale: 0.2, bias: true, rotary: true, slots: true },
  // Decode steps at real head sizes (the GPU's decode kernel: a lane group of 8, 12 or 16 vectors a
  // head, several rounds of positions a split, the splits joined by the last to finish).
  { name: 'paged over slots decode, dim 64, 8 heads a key head, rows of 1 to 230 positions', op: 'paged', tokens: 1, heads: 16, kvHeads: 2, dim: 64, past: [0, 77, 229], window: 0, softcap: 0, scale: 0.125, rotary: true, slots: true },
  { name: 'paged decode, dim 96, one head a key head, bias, block table', op: 'paged', tokens: 1, heads: 3, kvHeads: 3, dim: 96, past: [40, 181], window: 0, softcap: 0, scale: 0.1, bias: true, rotary: true, blockSize: 16 },
  { name: 'paged over slots decode, dim 128, q/k norms, window 100', op: 'paged', tokens: 1, heads: 4, kvHeads: 2, dim: 128, past: [12, 150], window: 100, softcap: 0, scale: 0.09, rotary: true, norms: true, slots: true },
  // One split of a decode step at these head sizes takes the tensor-core kernel: a group of 16 query
  // heads (every row of its products), more tiles than each warp stages, a cap on the scores.
  { name: 'paged decode, dim 128, 16 heads a key head, softcap 2, rows of 1 to 300 positions', op: 'paged', tokens: 1, heads: 16, kvHeads: 1, dim: 128, past: [0, 33, 299], window: 0, softcap: 2, scale: 0.09, rotary: true, blockSize: 16 },
  // Prefills at these head sizes take it too where asked: 2 tokens a block for groups of 8, 8 for groups of 2.
  { name: 'paged over slots prefill of 37, dim 64, 8 heads a key head, window 24, rows from 0 and 50', op: 'paged', tokens: 37, heads: 16, kvHeads: 2, dim: 64, past: [0, 50], window: 24, softcap: 0, scale: 0.125, rotary: true, slots: true },
  { name: 'paged prefill of 20, dim 128, 2 heads a key head, q/k norms, bias, block table', op: 'paged', tokens: 20, heads: 4, kvHeads: 2, dim: 128, past: [3, 31], window: 0, softcap: 0, scale: 0.09, bias: true, rotary: true, norms: true, blockSize: 16 },
  // Gemma 2's heads of 256 (the queries read from shared memory at each tile), its cap and window.
  { name: 'paged prefill of 40, dim 256, 2 heads a key head, window 24, softcap 2, block table', op: 'paged', tokens: 40, heads: 4, kvHeads: 2, dim: 256, past: [0, 19], window: 24, softcap: 2, scale: 0.0625, rotary: true, blockSize: 16 },
  // Long enough that each warp takes more tiles than it stages (3 at heads of 64, 2 at 128).
  { name: 'paged over slots prefill of 250, dim 64, 8 heads a key head', op: 'paged', tokens: 250, heads: 16, kvHeads: 2, dim: 64, past: [0, 20], window: 0, softcap: 0, scale: 0.125, rotary: true, slots: true },
  { name: 'paged prefill of 150, dim 128, 2 heads a key head, block table', op: 'paged', tokens: 150, heads: 4, kvHeads: 2, dim: 128, past: [0, 9], window: 0, softcap: 0, scale: 0.09, rotary: true, blockSize: 16 },
  // Heads of 256 (Gemma 2's): the tensor-core kernel reads the queries from shared memory at each tile.
  { name: 'paged over slots prefill of 45, dim 256, 2 heads a key head, window 30, softcap 3, rows from 0 and 20', op: 'paged', tokens: 45, heads: 4, kvHeads: 2, dim: 256, past: [0, 20], window: 30, softcap: 3, scale: 0.0625, rotary: true, slots: true },
  { name: 'paged decode, dim 256, 2 heads a key head, softcap 2, rows of 1 to 80 positions', op: 'paged', tokens: 1, heads: 4, kvHeads: 2, dim: 256, past: [0, 40, 79], window: 0, softcap: 2, scale: 0.0625, rotary: true, blockSize: 16 },
];

/** The case's call on seeded random float32 data, with NaN wherever no query of the call may read. */
function callOf(c: Case, seed: number, poison = true): Float32Call {
  const random = uniformStream(seed);
  const uniform = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => Math.fround((random() * 2 - 1) * scale));
  const rows = c.past.length;
  const width = (c.heads + 2 * c.kvHeads) * c.dim;
  const end = Math.max(...c.past) + c.tokens;
  const blockSize = c.slots === true ? end : (c.blockSize ?? 1);
  const maxBlocks = Math.ceil(end / blockSize);
  // Paged: block 0 is NaN throughout, and every row's blocks are spread over the rest in a shuffled order.
  const order = Array.from({ length: rows * maxBlocks }, (_, i) => i + 1);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const readable = (r: number, j: number): boolean => j >= firstKey(c.past[r]!, c.window) && j < c.past[r]! + c.tokens;
  const blockTable =
    c.op === 'paged' && c.slots !== true
      ? Int32Array.from({ length: rows * maxBlocks }, (_, i) => {
          const [r, b] = [Math.floor(i / maxBlocks), i % maxBlocks];
          const used = Array.from({ length: blockSize }, (_, o) => readable(r, b * blockSize + o)).some(Boolean);
          return used || !poison ? order[i]! : 0;
        })
      : undefined;
  const blocks = c.slots === true ? rows : rows * maxBlocks + 1;
  const cacheElements = (c.op === 'paged' ? blocks : rows) * c.kvHeads * (c.op === 'paged' ? blockSize : end) * c.dim;
  const call: Float32Call = {
    op: c.op,
    rows,
    tokens: c.tokens,
    heads: c.heads,
    kvHeads: c.kvHeads,
    dim: c.dim,
    qkv: uniform(rows * c.tokens * width, 2),
    key: uniform(cacheElements, 2),
    value: uniform(cacheElements, 2),
    seqlens: Int32Array.from(c.past, (p) => p + c.tokens - 1),
    scale: c.scale,
    slidingWindow: c.window,
    softcap: c.softcap,
    ...(c.bias === true ? { bias: uniform(width, 0.5) } : {}),
    ...(c.op === 'slot' ? { capacity: end } : { blockSize, blocks, maxBlocks, ...(blockTable === undefined ? {} : { blockTable }) }),
    ...(c.norms === true ? { qNorm: uniform(c.dim, 1.5), kNorm: uniform(c.dim, 1.5), epsilon: 1e-5 } : {}),
  };
  if (c.rotary === true) {
    const angles = Array.from({ length: (end * c.dim) / 2 }, () => random() * 2 * Math.PI);
    Object.assign(call, { rotaryPositions: end, cos: Float32Array.from(angles, Math.cos), sin: Float32Array.from(angles, Math.sin) });
  }
  if (!poison) return call;
  if (c.op === 'paged' && c.slots !== true) {
    call.key.fill(Number.NaN, 0, c.kvHeads * blockSize * c.dim);
    call.value.fill(Number.NaN, 0, c.kvHeads * blockSize * c.dim);
  }
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < (c.op === 'slot' ? end : maxBlocks * blockSize); j++) {
      if (readable(r, j) || (blockTable !== undefined && blockTable[r * maxBlocks + Math.floor(j / blockSize)] === 0)) continue;
      for (let k = 0; k < c.kvHeads; k++) {
        const at = cacheAt(call, r, k, j);
        call.key.fill(Number.NaN, at, at + c.dim);
        call.value.fill(Number.NaN, at, at + c.dim);
      }
    }
  }
  return call;
}

/** The largest |a - b| (NaN where one of them alone is NaN; both NaN count as equal). */
function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const [x, y] = [a[i]!, b[i]!];
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    worst = Math.max(worst, Number.isNaN(x) || Number.isNaN(y) ? Number.POSITIVE_INFINITY : Math.abs(x - y));
  }
  return worst;
}

function attend(call: NativeAttentionCall, device: boolean): Float32Array | Uint16Array {
  return addon!.attendRows(call, device);
}

describe('the decoder attention kernels with sliding windows and soft-capped scores', { skip }, () => {
  for (const c of CASES) {
    test(`${c.name}: the host kernel's output and caches are the reference's`, () => {
      const call = callOf(c, 7);
      const want = referenceAttention(call);
      const output = attend(call, false) as Float32Array;
      assert.ok(maxDiff(output, want.output) < 1e-5, `output off by ${maxDiff(output, want.output)}`);
      assert.ok(maxDiff(call.key, want.key) < 1e-6, `keys off by ${maxDiff(call.key, want.key)}`);
      assert.ok(maxDiff(call.value, want.value) < 1e-6, `values off by ${maxDiff(call.value, want.value)}`);
    });
  }

  test('the cases bite: without the window or the cap the reference answers otherwise', () => {
    for (const c of CASES) {
      const plain = { ...c, window: c.window > 0 && c.window <= Math.max(...c.past) ? 0 : c.window, softcap: 0 };
      if (plain.window === c.window && plain.softcap === c.softcap) continue;
      const diff = maxDiff(referenceAttention(callOf(c, 7, false)).output, referenceAttention(callOf(plain, 7, false)).output);
      assert.ok(diff > 1e-2, `${c.name}: ${diff}`);
    }
  });

  test('a window as long as the row, and a cap far above the scores, change nothing', () => {
    const c = CASES[4]!;
    const plain = attend(callOf({ ...c, window: 0 }, 3, false), false);
    assert.ok(maxDiff(attend(callOf({ ...c, window: Math.max(...c.past) + 1 }, 3, false), false), plain) === 0);
    assert.ok(maxDiff(attend(callOf({ ...c, window: 0, softcap: 1e7 }, 3, false), false), plain) < 1e-6);
  });

  test('bad calls are refused by name', () => {
    const call = callOf(CASES[0]!, 1);
    assert.throws(() => attend({ ...call, slidingWindow: -1 }, false), /slidingWindow and softcap >= 0/);
    assert.throws(() => attend({ ...call, key: call.key.subarray(1) }, false), /call.key must hold/);
    assert.throws(() => attend({ ...call, op: 'dense' as 'slot' }, false), /call.op must be 'slot' or 'paged'/);
  });

  // CHORUS_PAGED_DECODE=0: PagedAttention's decode steps in the general kernel, DecoderSlotAttention's
  // in the slot kernel (read at each launch). Otherwise 16-bit decode steps in 1 split of heads of 64,
  // 96, 128 or 256 take the tensor-core kernel, in more the decode kernel; the prefills of those heads
  // take the tensor-core kernel too (the default): where they make blocks enough to fill the GPU (none
  // of these), its warps share each tile; `shared` (CHORUS_PAGED_MMA_PREFILL=shared) takes that kernel
  // for every prefill. Decode steps of heads of 128 stage 3 tiles a warp where their blocks are few (all of
  // these); `2 stages` (CHORUS_PAGED_MMA_STAGES=2) asks the 2 that many blocks take.
  test('on the GPU: fp32 as the reference, fp16 and bf16 as the host kernels, paged in 1, 3 and 16 splits, decode kernel and general', { skip: gpu ? false : 'no CUDA device' }, (t) => {
    t.after(() => {
      delete process.env.CHORUS_PAGED_DECODE;
      delete process.env.CHORUS_PAGED_MMA_PREFILL;
      delete process.env.CHORUS_PAGED_MMA_STAGES;
    });
    // A slot decode step of 16-bit types goes to PagedAttention's decode kernel unless decode is 0.
    const settings = (c: Case): string[] => (c.tokens === 1 ? ['1', '0', ...(c.dim === 128 ? ['2 stages'] : [])] : ['1', 'shared']);
    for (const [c, decode] of CASES.flatMap((c) => settings(c).map((d) => [c, d] as const))) {
      process.env.CHORUS_PAGED_DECODE = decode === '0' ? '0' : '1';
      if (decode === '2 stages') {
        process.env.CHORUS_PAGED_MMA_STAGES = '2';
      } else {
        delete process.env.CHORUS_PAGED_MMA_STAGES;
      }
      if (decode === 'shared') {
        process.env.CHORUS_PAGED_MMA_PREFILL = 'shared';
      } else {
        delete process.env.CHORUS_PAGED_MMA_PREFILL;
      }
      // Splits keep a counter per token row and head, 4096 at most: a prefill past that is refused them.
      const counted = c.past.length * c.tokens * c.heads <= 4096;
      if (c.op === 'paged' && !counted) {
        assert.throws(() => attend({ ...callOf(c, 11), splits: 3 }, true), new RegExp(`PagedAttention takes splits for at most 4096 token rows x heads, not ${c.past.length * c.tokens * c.heads}`));
      }
      for (const splits of c.op === 'paged' ? (counted ? [undefined, 1, 3, 16] : [undefined, 1]) : [undefined]) {
        const call = { ...callOf(c, 11), ...(splits === undefined ? {} : { splits }) };
        if (c.dim > 128) {
          // float32 heads past 128 are the 16-bit types' alone on the GPU.
          assert.throws(() => attend(call, true), new RegExp(`PagedAttention on CUDA takes head_dim a multiple of 4 up to 128, not ${c.dim}`));
        } else {
          const want = referenceAttention(call);
          const output = attend(call, true) as Float32Array;
          assert.ok(maxDiff(output, want.output) < 1e-4, `${c.name} (splits ${splits}, decode ${decode}): fp32 output off by ${maxDiff(output, want.output)}`);
          assert.ok(maxDiff(call.key, want.key) < 1e-5, `${c.name}: fp32 keys off by ${maxDiff(call.key, want.key)}`);
        }
        for (const [dtype, tolerance] of [['fp16', 4e-3], ['bf16', 3e-2]] as const) {
          const host = narrowed(callOf(c, 11), dtype);
          const device = { ...narrowed(callOf(c, 11), dtype), ...(splits === undefined ? {} : { splits }) };
          const widen = dtype === 'fp16' ? fromHalfBits : fromBfloat16Bits;
          const [a, b] = [Array.from(attend(host, false), widen), Array.from(attend(device, true), widen)];
          assert.ok(maxDiff(a, b) < tolerance, `${c.name} (splits ${splits}, decode ${decode}): ${dtype} output off by ${maxDiff(a, b)}`);
          assert.ok(maxDiff(Array.from(host.key, widen), Array.from(device.key, widen)) < tolerance, `${c.name}: ${dtype} keys`);
        }
      }
    }
  });
});

/** Every attention node of the addon in `dir`'s slot and paged decoders given `attributes`. */
function withAttributes(dir: string, attributes: { sliding_window: number; softcap: number }): void {
  const types = onnxProto.onnx.AttributeProto.AttributeType;
  for (const file of ['decoder_model_slots.onnx', 'decoder_model_paged.onnx']) {
    const path = join(dir, 'onnx', file);
    const model = onnxProto.onnx.ModelProto.decode(readFileSync(path));
    const nodes = model.graph!.node!.filter((n) => n.domain === 'chorus' && (n.opType === 'DecoderSlotAttention' || n.opType === 'PagedAttention'));
    assert.ok(nodes.length > 0, `${file} has the addon's attention`);
    for (const node of nodes) {
      node.attribute!.push({ name: 'sliding_window', type: types.INT, i: attributes.sliding_window }, { name: 'softcap', type: types.FLOAT, f: attributes.softcap });
    }
    writeFileSync(path, onnxProto.onnx.ModelProto.encode(model).finish());
  }
}

describe('sliding_window and softcap on the operators, through the native engine (CPU)', { skip }, () => {
  const root = scratchDir('chorus-attention-');
  const dirs = { plain: join(root, 'plain'), windowed: join(root, 'windowed'), wide: join(root, 'wide'), bad: join(root, 'bad') };
  const engines: NativeEngine[] = [];
  const prompts = [[5, 6, 7, 8, 9, 10], [3], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]];
  before(() => {
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 21, out: join(root, 'ckpt') });
    buildModel({ source: join(root, 'ckpt'), out: dirs.plain, flavor: 'cuda', slotDecoder: true });
    for (const dir of [dirs.windowed, dirs.wide, dirs.bad]) cpSync(dirs.plain, dir, { recursive: true });
    withAttributes(dirs.windowed, { sliding_window: 3, softcap: 1.5 });
    withAttributes(dirs.wide, { sliding_window: 4096, softcap: 1e6 });
  });
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const greedyIds = async (dir: string, pagedCache: boolean): Promise<number[][]> => {
    const engine = await NativeEngine.open(dir, { maxBatchSize: 4, pagedCache, blockSize: 4 });
    engines.push(engine);
    const params = { temperature: 0, request_output_len: 24 };
    const runs = await Promise.all(prompts.map((inputIds) => lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))));
    return runs.map((events) => events.map((e) => e.token));
  };

  test('a window of 3 and a cap of 1.5: the slot and paged decoders agree, and answer otherwise than without them', async () => {
    const slots = await greedyIds(dirs.windowed, false);
    assert.deepEqual(await greedyIds(dirs.windowed, true), slots);
    assert.notDeepEqual(slots, await greedyIds(dirs.plain, false));
  });

  test('a window longer than every row and a cap far above the scores answer as none', async () => {
    const plain = await greedyIds(dirs.plain, false);
    assert.deepEqual(await greedyIds(dirs.wide, false), plain);
    assert.deepEqual(await greedyIds(dirs.wide, true), plain);
  });

  test('a negative window or cap fails the session, naming the attribute', async () => {
    withAttributes(dirs.bad, { sliding_window: -2, softcap: 0 });
    await assert.rejects(NativeEngine.open(dirs.bad, { maxBatchSize: 1 }), /sliding_window must be an integer in \[0, 2\^31\), got -2/);
    cpSync(dirs.plain, dirs.bad, { recursive: true });
    withAttributes(dirs.bad, { sliding_window: 0, softcap: -1 });
    await assert.rejects(NativeEngine.open(dirs.bad, { maxBatchSize: 1, pagedCache: true }), /softcap must be a finite number >= 0, got -1/);
  });
});

// DecoderSlotAttention's decode steps of few rows go to PagedAttention's decode kernel over the slots;
// with CHORUS_PAGED_DECODE=0 (read at each launch) they stay in the slot kernel.
describe("DecoderSlotAttention's decode steps on the GPU", { skip: gpu ? false : 'no CUDA device' }, () => {
  test('through PagedAttention\'s decode kernel, GPT-2 fp16 greedy gives the slot kernel\'s ids, with CUDA graphs and without', async (t) => {
    t.after(() => delete process.env.CHORUS_PAGED_DECODE);
    const root = scratchDir('chorus-slot-decode-');
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 23, out: join(root, 'ckpt') });
    buildModel({ source: join(root, 'ckpt'), out: join(root, 'built'), flavor: 'cuda', slotDecoder: true, dtype: 'fp16' });
    const prompts = [[5, 6, 7, 8, 9, 10], [3], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]];
    const ids = async (cudaGraph: boolean): Promise<number[][]> => {
      const engine = await NativeEngine.open(join(root, 'built'), { provider: 'cuda', maxBatchSize: 4, cudaGraph });
      try {
        const params = { temperature: 0, request_output_len: 40 };
        const runs = await Promise.all(prompts.map((inputIds) => lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))));
        return runs.map((events) => events.map((e) => e.token));
      } finally {
        await engine.close();
      }
    };
    for (const cudaGraph of [false, true]) {
      delete process.env.CHORUS_PAGED_DECODE;
      const decodeKernel = await ids(cudaGraph);
      process.env.CHORUS_PAGED_DECODE = '0';
      const slotKernel = await ids(cudaGraph);
      assert.deepEqual(decodeKernel, slotKernel, `cudaGraph ${cudaGraph}`);
    }
  });
});

/** The call in fp16 or bf16 (its float arrays as 16-bit bits). */
function narrowed(call: Float32Call, dtype: 'fp16' | 'bf16'): NativeAttentionCall {
  const bits = (x: Float32Array | undefined): Uint16Array | undefined => (x === undefined ? undefined : Uint16Array.from(x, dtype === 'fp16' ? toHalfBits : toBfloat16Bits));
  return { ...call, dtype, qkv: bits(call.qkv)!, key: bits(call.key)!, value: bits(call.value)!, bias: bits(call.bias), cos: bits(call.cos), sin: bits(call.sin), qNorm: bits(call.qNorm), kNorm: bits(call.kNorm) };
}

/** bfloat16 bits of a float32, rounded to nearest even (NaN kept NaN). */
function toBfloat16Bits(value: number): number {
  if (Number.isNaN(value)) return 0x7fc0;
  const f32 = new Uint32Array(Float32Array.of(value).buffer)[0]!;
  return ((f32 + 0x7fff + ((f32 >>> 16) & 1)) >>> 16) & 0xffff;
}

// Launches of several shapes share an operator's workspace: the decode kernel's counters (left at zero
// by each launch) must not lie under another shape's partial sums.
describe("PagedAttention's workspace on the GPU", { skip: gpu ? false : 'no CUDA device' }, () => {
  test('decode steps of 1 row after steps of 4 give the ids they gave before them', async () => {
    const root = scratchDir('chorus-paged-workspace-');
    makeCheckpoint({ arch: 'llama3', size: 'tiny', seed: 29, out: join(root, 'ckpt') });
    const dir = join(root, 'built');
    buildModel({ source: join(root, 'ckpt'), out: dir, flavor: 'cuda', slotDecoder: true, dtype: 'fp16', slotAttention: 'PagedAttention' });
    const prompts = [[5, 6, 7, 8, 9, 10], [3, 4], [12, 13, 14, 15, 16, 17, 18, 19], [40, 41, 42]];
    const params = { temperature: 0, request_output_len: 48 };
    const engine = await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: 4, cudaGraph: false });
    try {
      const run = async (inputIds: number[]): Promise<number[]> => (await lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))).map((e) => e.token);
      const alone: number[][] = [];
      for (const prompt of prompts) alone.push(await run(prompt));
      // Steps of 4 rows (their partial sums over more of the workspace), then each prompt alone again.
      const together = await Promise.all(prompts.map(run));
      assert.equal(together.length, 4);
      for (const [i, prompt] of prompts.entries()) assert.deepEqual(await run(prompt), alone[i], `prompt ${i}`);
    } finally {
      await engine.close();
    }
  });
});
