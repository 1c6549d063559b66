import assert from 'node:assert/strict';
import { mkdirSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { loadRepository } from '../../src/repository/index.ts';
import { activationReserve, checkUtilization, pagedPlan, slotsFit, tokenBytes, type MemoryShape, type PagedDecoderOptions } from '../../src/generation/engines/native-memory.ts';
import { scratchDir } from '../helpers/scratch.ts';

const GIB = 2 ** 30;
// Llama-2-7B's shape in fp16.
const shape: MemoryShape = { layers: 32, kvHeads: 32, headDim: 128, heads: 32, vocab: 32000, element: 2 };

/** A model directory whose decoders' weights file is `weights` bytes (sparse: truncate sizes it), with the paged decoder or without. */
function modelDir(weights: number, paged: boolean): string {
  const dir = scratchDir('chorus-memory-');
  mkdirSync(join(dir, 'onnx'));
  writeFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'), 'x');
  if (paged) writeFileSync(join(dir, 'onnx', 'decoder_model_paged.onnx'), 'x');
  writeFileSync(join(dir, 'onnx', 'decoder_model_merged.onnx_data'), '');
  truncateSync(join(dir, 'onnx', 'decoder_model_merged.onnx_data'), weights);
  return dir;
}

const plan = (dir: string, memory: { free: number; total: number }, pagedCache: boolean | 'auto' = 'auto', slots = 64, slotLength = 4096): PagedDecoderOptions | undefined =>
  pagedPlan(() => memory, dir, 'decoder_model_paged.onnx', 'decoder_model_slots.onnx', { provider: 'cuda', pagedCache }, shape, slots, slotLength, 0.9);

describe('the native engine\'s memory plan', () => {
  test('gpu_memory_utilization must be in (0, 1]', () => {
    assert.equal(checkUtilization(1), 1);
    assert.equal(checkUtilization(0.5), 0.5);
    for (const bad of [0, -1, 1.01, Number.NaN]) assert.throws(() => checkUtilization(bad), { code: 'CHORUS_INVALID_ARGUMENT', message: /gpu_memory_utilization must be a number in \(0, 1\]/ });
  });

  test('a model definition\'s gpu_memory_utilization is checked against (0, 1]', () => {
    const repository = scratchDir('chorus-utilization-');
    mkdirSync(join(repository, 'models'));
    const values = { low: '0', high: '1.5', text: 'most', fine: '0.75' };
    for (const [name, value] of Object.entries(values)) writeFileSync(join(repository, 'models', `${name}.yaml`), `engine: generate\nsource: ./nowhere\ngpu_memory_utilization: ${value}\n`);
    const messages = loadRepository(repository).diagnostics.filter((d) => d.message.includes('gpu_memory_utilization')).map((d) => d.message);
    assert.deepEqual(messages.sort(), ['gpu_memory_utilization must be <= 1, got 1.5', 'gpu_memory_utilization must be > 0, got 0', 'gpu_memory_utilization must be a number, got string "most"'].sort());
  });

  test('weights that do not fit what the GPU has free fail with what is needed against what is free', () => {
    const dir = modelDir(13.5 * GIB, true);
    assert.throws(() => plan(dir, { free: 12 * GIB, total: 80 * GIB }), {
      code: 'CHORUS_DEVICE_MEMORY',
      message: /needs 13\.50 GiB of weights and .* GiB for activations on GPU 0, which has 12\.00 GiB free of 80\.00 GiB/,
    });
  });

  test('the slots when they fit beside the weights, the paged cache when 64 x 4k of Llama-2-7B does not', () => {
    const dir = modelDir(13.5 * GIB, true);
    // 64 x 4096 tokens at 512 KiB a token is 128 GiB: paged on an 80 GB H100.
    assert.equal(tokenBytes(shape), 512 * 1024);
    const paged = plan(dir, { free: 79 * GIB, total: 80 * GIB });
    assert.deepEqual(paged, { blockSize: 16, memoryUtilization: 0.9, reserveBytes: activationReserve(shape, 64, 16384) });
    // 8 slots of 1024 tokens (4 GiB) fit: the slots.
    assert.equal(plan(dir, { free: 79 * GIB, total: 80 * GIB }, 'auto', 8, 1024), undefined);
    // Forced either way; without the paged decoder, auto keeps the slots.
    assert.notEqual(plan(dir, { free: 79 * GIB, total: 80 * GIB }, true, 8, 1024), undefined);
    assert.equal(plan(dir, { free: 79 * GIB, total: 80 * GIB }, false), undefined);
    assert.equal(plan(modelDir(13.5 * GIB, false), { free: 79 * GIB, total: 80 * GIB }), undefined);
  });

  test('the continuous core\'s staging slots are counted beside the cache: taken where they fit, left out where they do not', () => {
    const dir = modelDir(13.5 * GIB, true);
    const fit = (free: number, extra: number): boolean => slotsFit(() => ({ free, total: 80 * GIB }), dir, 'decoder_model_slots.onnx', 0, shape, 64, extra, 1024, 0.9);
    // 64 x 1024 tokens of Llama-2-7B are 32 GiB; 4 staging slots 2 GiB more.
    // The weights: the external data and the one-byte graph file.
    const needed = 13.5 * GIB + 1 + activationReserve(shape, 64, 16384) + 64 * 1024 * tokenBytes(shape);
    assert.equal(fit(needed, 0), true);
    assert.equal(fit(needed, 4), false);
    assert.equal(fit(needed + 2 * GIB, 4), true);
    // Never more than the utilization's share of the device, whatever is free.
    assert.equal(slotsFit(() => ({ free: 80 * GIB, total: 80 * GIB }), dir, 'decoder_model_slots.onnx', 0, shape, 64, 4, 4096, 0.9), false);
    // A device that reports nothing (an addon without CUDA): no.
    assert.equal(slotsFit(() => ({ free: 0, total: 0 }), dir, 'decoder_model_slots.onnx', 0, shape, 1, 0, 16, 0.9), false);
  });

  test('auto takes the paged cache where the slot decoder\'s attention would run on the host (fp32 rotary on CUDA)', () => {
    const dir = modelDir(1 * GIB, true);
    const fits = { free: 79 * GIB, total: 80 * GIB };
    const host = (pagedCache: boolean | 'auto', built = dir): PagedDecoderOptions | undefined =>
      pagedPlan(() => fits, built, 'decoder_model_paged.onnx', 'decoder_model_slots.onnx', { provider: 'cuda', pagedCache, slotAttentionOnHost: true }, { ...shape, element: 4 }, 8, 1024, 0.9);
    assert.equal(plan(dir, fits, 'auto', 8, 1024), undefined);
    assert.notEqual(host('auto'), undefined);
    // Slots asked for, or no paged decoder built: the slots.
    assert.equal(host(false), undefined);
    assert.equal(host('auto', modelDir(1 * GIB, false)), undefined);
  });
});
