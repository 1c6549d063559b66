import assert from 'node:assert/strict';
import { mkdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { pagedPlan, type MemoryShape } from '../../src/generation/engines/native-memory.ts';
import { rankLayout, rankShares, rankWeightBytes } from '../../src/generation/engines/native-ranks.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** A directory laid out as a build split in 2: each rank's decoder (100 bytes) and data file (1000 + r). */
function splitDir(): string {
  const dir = scratchDir('chorus-ranks-layout-');
  for (const r of [0, 1]) {
    mkdirSync(join(dir, 'onnx', 'tp2', `rank${r}`), { recursive: true });
    writeFileSync(join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx'), Buffer.alloc(100));
    writeFileSync(join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx_data'), Buffer.alloc(1000 + r));
  }
  return dir;
}

const heads = { numHeads: 8, numKvHeads: 2 };

test('a split build runs on one GPU per rank, each its own, all on the host', () => {
  const dir = splitDir();
  assert.deepEqual(rankLayout(dir, 2, 2, heads, { devices: [2, 3], count: 4 }), { n: 2, devices: [2, 3], kvHeads: 1 });
  assert.deepEqual(rankLayout(dir, 2, 2, { numHeads: 8, numKvHeads: 1 }, undefined), { n: 2, devices: [], kvHeads: 1 });
  assert.deepEqual(rankLayout(dir, 2, 2, { numHeads: 8, numKvHeads: 8 }, undefined).kvHeads, 4);
  assert.throws(() => rankLayout(dir, 2, 2, heads, { devices: [0, 1], count: 1 }), /tensor_parallel 2 puts rank 1 on GPU 1, and this host has 1 GPU; list 2 GPUs per instance/);
  assert.throws(() => rankLayout(dir, 2, 2, heads, { devices: [1, 1], count: 2 }), /ranks 0 and 1 are both on GPU 1; each rank needs a GPU of its own/);
  assert.throws(() => rankLayout(dir, 2, 2, heads, { devices: [0], count: 2 }), /runs each instance on 2 GPUs, and this one was given 1/);
});

test('a build of another split, or with a rank missing, is refused by name', () => {
  const dir = splitDir();
  assert.throws(() => rankLayout(dir, 1, 2, heads, undefined), /is built split over 2 ranks, and the model asks for tensor_parallel 1/);
  assert.throws(() => rankLayout(dir, 4, 2, heads, undefined), /split over 2 ranks, and the model asks for tensor_parallel 4; build it with tensor_parallel: 4/);
  assert.throws(() => rankLayout(dir, 0, 1, heads, undefined), /tensor_parallel must be an integer of at least 1, got 0/);
  const partial = splitDir();
  rmSync(join(partial, 'onnx', 'tp2', 'rank1', 'decoder_model_slots.onnx'));
  assert.throws(() => rankLayout(partial, 2, 2, heads, undefined), /tensor_parallel 2: rank 1's decoder .*rank1\/decoder_model_slots\.onnx is missing/);
});

test('each rank\'s share: its decoder and its data file, in the load log', () => {
  const dir = splitDir();
  assert.equal(rankWeightBytes(dir, 2, 1, 'decoder_model_slots.onnx'), 1101);
  const line = rankShares(dir, { n: 2, devices: [0, 1], kvHeads: 1 }, 'decoder_model_slots.onnx', [2 ** 30, 2 ** 31]);
  assert.equal(line, 'tensor_parallel 2: GPU 0 0.00 GiB of weights and 1.00 GiB of cache; GPU 1 0.00 GiB of weights and 2.00 GiB of cache');
});

test('weights larger than one GPU\'s share are refused unsplit, saying what they need, and fit split in two', () => {
  // A 26 GiB model (sparse files: truncate sizes them) whole, and each half with its own data file.
  const GIB = 2 ** 30;
  const dir = scratchDir('chorus-ranks-memory-');
  mkdirSync(join(dir, 'onnx'));
  writeFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'), 'x');
  writeFileSync(join(dir, 'onnx', 'decoder_model_merged.onnx_data'), '');
  truncateSync(join(dir, 'onnx', 'decoder_model_merged.onnx_data'), 26 * GIB);
  for (const r of [0, 1]) {
    mkdirSync(join(dir, 'onnx', 'tp2', `rank${r}`), { recursive: true });
    writeFileSync(join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx'), 'x');
    writeFileSync(join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx_data'), '');
    truncateSync(join(dir, 'onnx', 'tp2', `rank${r}`, 'decoder_model_slots.onnx_data'), 13 * GIB);
  }
  // Llama-2-13B's shape in fp16, on GPUs of 80 GiB allowed a quarter each (20 GiB).
  const shape: MemoryShape = { layers: 40, kvHeads: 40, headDim: 128, heads: 40, vocab: 32000, element: 2 };
  const gpus = new Map([[0, { free: 79 * GIB, total: 80 * GIB }], [1, { free: 78 * GIB, total: 80 * GIB }]]);
  const plan = (ranks?: { n: number; devices: number[]; weights: (file: string) => number[] }) =>
    pagedPlan((device) => gpus.get(device)!, dir, 'decoder_model_paged.onnx', 'decoder_model_slots.onnx', { provider: 'cuda', pagedCache: false }, shape, 4, 256, 0.25, ranks);
  assert.throws(() => plan(), { code: 'CHORUS_DEVICE_MEMORY', message: /needs 26\.00 GiB of weights and [\d.]+ GiB for activations on GPU 0, which has 79\.00 GiB free of 80\.00 GiB .*gpu_memory_utilization 0\.25 allows 20\.00 GiB.*tensor_parallel/ });
  assert.equal(plan({ n: 2, devices: [0, 1], weights: (file) => [0, 1].map((r) => rankWeightBytes(dir, 2, r, file)) }), undefined);
  // Each rank is checked on its own GPU.
  gpus.set(1, { free: 10 * GIB, total: 80 * GIB });
  assert.throws(() => plan({ n: 2, devices: [0, 1], weights: (file) => [0, 1].map((r) => rankWeightBytes(dir, 2, r, file)) }), /needs 13\.00 GiB of weights .* on GPU 1, which has 10\.00 GiB free/);
});

test('on CUDA a split model takes its paged decoder where the slots would fit too; one whole model keeps the slots', () => {
  const GIB = 2 ** 30;
  const dir = scratchDir('chorus-ranks-paged-');
  for (const sub of [join('onnx'), join('onnx', 'tp2', 'rank0'), join('onnx', 'tp2', 'rank1')]) {
    mkdirSync(join(dir, sub), { recursive: true });
    for (const file of ['decoder_model_slots.onnx', 'decoder_model_paged.onnx']) writeFileSync(join(dir, sub, file), 'x');
  }
  const shape: MemoryShape = { layers: 2, kvHeads: 2, headDim: 16, heads: 2, vocab: 64, element: 2 };
  const gpus = new Map([[0, { free: 79 * GIB, total: 80 * GIB }], [1, { free: 79 * GIB, total: 80 * GIB }]]);
  const plan = (ranks?: { n: number; devices: number[]; weights: (file: string) => number[] }) =>
    pagedPlan((device) => gpus.get(device)!, dir, 'decoder_model_paged.onnx', 'decoder_model_slots.onnx', { provider: 'cuda' }, shape, 4, 256, 0.9, ranks);
  assert.equal(plan(), undefined);
  const split = plan({ n: 2, devices: [0, 1], weights: () => [1024, 1024] });
  assert.equal(split?.blockSize, 16);
  assert.equal(split?.memoryUtilization, 0.9);
});
