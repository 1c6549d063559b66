import assert from 'node:assert/strict';
import onnxProto from 'onnx-proto';
import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type Engine, type NativeEngineOptions, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-paged-');
const llama = join(root, 'llama');
const qwen2 = join(root, 'qwen2');
const gpt2 = join(root, 'gpt2');
const qwen3 = join(root, 'qwen3');

function run(engine: Engine, inputIds: number[], params: SamplingParams): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds, params, stream: true }).pipe(toArray()));
}

const ids = (events: TokenEvent[]): number[] => events.map((e) => e.token);

describe('the paged native engine (CPU)', { skip }, () => {
  const engines: NativeEngine[] = [];
  before(() => {
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 11, out: join(root, 'llama-ckpt') });
    buildModel({ source: join(root, 'llama-ckpt'), out: llama, flavor: 'cuda', slotDecoder: true });
    makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 12, out: join(root, 'qwen2-ckpt') });
    buildModel({ source: join(root, 'qwen2-ckpt'), out: qwen2, flavor: 'cuda', slotDecoder: true });
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 13, out: join(root, 'gpt2-ckpt') });
    buildModel({ source: join(root, 'gpt2-ckpt'), out: gpt2, flavor: 'cuda', slotDecoder: true });
    makeCheckpoint({ arch: 'qwen3', size: 'tiny', seed: 14, out: join(root, 'qwen3-ckpt') });
    buildModel({ source: join(root, 'qwen3-ckpt'), out: qwen3, flavor: 'cuda', slotDecoder: true });
  });
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const open = async (dir: string, options: NativeEngineOptions): Promise<NativeEngine> => {
    const engine = await NativeEngine.open(dir, options);
    engines.push(engine);
    return engine;
  };

  test('the build writes the paged decoder beside the slot decoder, PagedAttention in every layer, on the same weights file', () => {
    const nodes = onnxProto.onnx.ModelProto.decode(readFileSync(join(llama, 'onnx', 'decoder_model_paged.onnx'))).graph!;
    const attention = nodes.node!.filter((n) => n.domain === 'chorus' && n.opType === 'PagedAttention');
    const layers = (JSON.parse(readFileSync(join(llama, 'chorus_build.json'), 'utf8')) as { spec: { numLayers: number } }).spec.numLayers;
    assert.equal(attention.length, layers);
    // Rotary caches in; no GroupQueryAttention, no total_sequence_length.
    assert.equal(attention[0]!.input!.length, 7);
    assert.deepEqual(nodes.node!.filter((n) => n.opType === 'GroupQueryAttention'), []);
    assert.ok(nodes.input!.some((i) => i.name === 'block_table'));
    assert.ok(!nodes.input!.some((i) => i.name === 'total_sequence_length'));
    assert.ok(existsSync(join(llama, 'onnx', 'decoder_model_merged.onnx_data')));
    assert.equal(existsSync(join(llama, 'onnx', 'decoder_model_paged.onnx_data')), false);
  });

  for (const [name, dir] of [
    ['a tiny Llama', llama],
    ['a tiny Qwen2 (q, k and v biases)', qwen2],
    ['a tiny GPT-2 (learned positions, no rotary)', gpt2],
    ['a tiny Qwen3 (q and k normed inside PagedAttention, in SimplifiedLayerNormalization before GroupQueryAttention)', qwen3],
  ] as const) {
    test(`greedy requests of different lengths get the contiguous slots' ids on ${name}, run together`, async () => {
      const contiguous = await open(dir, { maxBatchSize: 4, pagedCache: false });
      const paged = await open(dir, { maxBatchSize: 4, pagedCache: true, blockSize: 4 });
      assert.ok(paged.pagedBlocks !== undefined && contiguous.pagedBlocks === undefined);
      const requests = [
        { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 21 } },
        { prompt: [3], params: { temperature: 0, request_output_len: 9 } },
        { prompt: [12, 13, 14, 15], params: { temperature: 0, request_output_len: 30 } },
        { prompt: [12, 13, 14, 15], params: { temperature: 0, request_output_len: 5 } },
        { prompt: [20, 21], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 7, request_output_len: 13 } },
        { prompt: [4, 9, 2], params: { beam_width: 3, request_output_len: 10 } },
      ];
      const want = await Promise.all(requests.map((r) => run(contiguous, r.prompt, r.params)));
      const got = await Promise.all(requests.map((r, i) => new Promise<void>((resolve) => setTimeout(resolve, 2 * i)).then(() => run(paged, r.prompt, r.params))));
      assert.deepEqual(got.map(ids), want.map(ids));
      assert.deepEqual(got.map((events) => events.map((e) => e.sequence ?? 0)), want.map((events) => events.map((e) => e.sequence ?? 0)));
      // The finished requests leave after the run that took their last tokens, and their blocks with them.
      await settle(() => paged.stats().running === 0);
      assert.equal(paged.stats().running, 0);
      assert.equal(paged.pagedBlocks!.free, paged.pagedBlocks!.total);
    });
  }

  test('admission waits while the cache is full, a cancelled stream\'s blocks go to the next request, and a request that can never fit is refused', async () => {
    // 9 blocks of 4 (one kept aside): 32 tokens, reserved in whole blocks a row.
    const engine = await open(llama, { maxBatchSize: 2, pagedCache: true, blockSize: 4, cacheBlocks: 9 });
    const params = { temperature: 0, request_output_len: 14 } as const;
    const alone = ids(await run(engine, [3, 4, 5], params));
    await settle(() => engine.stats().running === 0);
    assert.equal(engine.pagedBlocks!.free, 8);
    // 17 tokens each, 5 blocks (20 tokens): the second waits for the first.
    const first = run(engine, [3, 4, 5], params);
    const second = run(engine, [3, 4, 5], params);
    const watch = engine.submit({ inputIds: [6], params: { temperature: 0, request_output_len: 1 }, stream: true });
    await new Promise<void>((resolve) => setTimeout(resolve, 0));
    const waitingSeen = engine.stats().waiting;
    assert.ok(waitingSeen >= 1, `a request waits for the cache (waiting: ${waitingSeen})`);
    assert.deepEqual(ids(await first), alone);
    assert.deepEqual(ids(await second), alone);
    await lastValueFrom(watch.pipe(toArray()));
    // A stream cancelled after 3 tokens gives its blocks back, and the request waiting behind it runs.
    const seen: TokenEvent[] = [];
    const subscription = engine.submit({ inputIds: [3, 4, 5], params: { temperature: 0, request_output_len: 20 }, stream: true }).subscribe((e) => {
      seen.push(e);
      if (seen.length === 3) subscription.unsubscribe();
    });
    assert.deepEqual(ids(await run(engine, [3, 4, 5], params)), alone);
    assert.equal(seen.length, 3);
    await settle(() => engine.stats().running + engine.stats().waiting === 0);
    assert.equal(engine.pagedBlocks!.free, 8);
    // 3 + 30 tokens never fit the cache's 32; 3 + 2000 never fit a row either.
    await assert.rejects(run(engine, [3, 4, 5], { temperature: 0, request_output_len: 30 }), { code: 'CHORUS_CANNOT_FIT', message: /33 tokens, more than the 32/ });
    await assert.rejects(run(engine, [3, 4, 5], { temperature: 0, request_output_len: 2000 }), { code: 'CHORUS_CANNOT_FIT' });
  });

  test('gpuMemoryUtilization must be in (0, 1], a paged cache needs the paged decoder, and bf16 needs CUDA', async () => {
    for (const value of [0, -0.5, 1.5, Number.NaN]) {
      await assert.rejects(NativeEngine.open(llama, { gpuMemoryUtilization: value }), { code: 'CHORUS_INVALID_ARGUMENT', param: 'gpuMemoryUtilization' });
    }
    await assert.rejects(NativeEngine.open(llama, { pagedCache: true, blockSize: 0 }), { code: 'CHORUS_INVALID_ARGUMENT', param: 'blockSize' });
    await assert.rejects(NativeEngine.open(llama, { pagedCache: true, cacheBlocks: 1 }), { code: 'CHORUS_INVALID_ARGUMENT', param: 'cacheBlocks' });
    // bf16 runs on CUDA; the CPU keeps fp32.
    const bf16 = join(root, 'bf16');
    cpSync(llama, bf16, { recursive: true });
    const info = JSON.parse(readFileSync(join(bf16, 'chorus_build.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(bf16, 'chorus_build.json'), JSON.stringify({ ...info, dtype: 'bf16' }));
    await assert.rejects(NativeEngine.open(bf16, {}), { code: 'CHORUS_UNSUPPORTED', message: /bf16 build, which runs on CUDA/ });
    const unpaged = join(root, 'unpaged');
    cpSync(llama, unpaged, { recursive: true });
    rmSync(join(unpaged, 'onnx', 'decoder_model_paged.onnx'));
    await assert.rejects(NativeEngine.open(unpaged, { pagedCache: true }), { code: 'CHORUS_UNSUPPORTED', message: /has no paged decoder/ });
  });
});

/** Waits (up to 2 s) until `done()` holds. */
async function settle(done: () => boolean): Promise<void> {
  for (let turn = 0; turn < 400 && !done(); turn++) await new Promise((resolve) => setTimeout(resolve, 5));
}
