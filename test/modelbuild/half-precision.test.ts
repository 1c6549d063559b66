import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { affine, geluTanh, silu } from '../../src/modelbuild/layers.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { fromHalfBits, toHalfBits } from '../../src/util/half.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';

const half = (value: number): number => fromHalfBits(toHalfBits(value));

/** Runs a float16 graph of one input `x` [1, 1, n] on the CPU; its output as numbers. */
async function runHalf(g: GraphBuilder, x: readonly number[]): Promise<number[]> {
  const { model } = g.serialize();
  const session = await ort.InferenceSession.create(model);
  try {
    const input = new ort.Tensor('float16', Uint16Array.from(x, toHalfBits), [1, 1, x.length]);
    const out = await session.run({ x: input });
    return Array.from(out.y!.data as Uint16Array, fromHalfBits);
  } finally {
    await session.release();
  }
}

test('a float16 projection adds its bias before rounding, once, as PyTorch addmm does', async () => {
  // x . w = 1 + 2^-11, halfway between two halves (rounds down to 1 on its own); plus the bias 2^-12 it
  // is 1 + 3 * 2^-12, which rounds up to 1 + 2^-10. Rounding the product first, then the sum, gives 1.
  const g = new GraphBuilder('float16');
  const x = g.input('x', 'float16', [1, 1, 2]);
  const weight = g.weight('w', { dims: [2, 2], data: Float32Array.of(1, 0, 2 ** -11, 1) });
  const bias = g.weight('b', { dims: [2], data: Float32Array.of(2 ** -12, 0.5) });
  g.output('y', affine(g, x, weight, bias, 2), 'float16', [1, 1, 2]);
  const [first, second] = await runHalf(g, [1, 1]);
  assert.equal(first, 1 + 2 ** -10);
  assert.equal(half(half(1 + 2 ** -11) + 2 ** -12), 1, 'rounding twice would have given 1');
  assert.equal(second, 1.5);
});

test('float16 SiLU is computed in float32 and rounded once, as PyTorch does; gelu_new follows transformers\' formula', async () => {
  // Within [-3, 3]: beyond, 1 + tanh of a large negative value cancels in float32 too.
  const xs = Array.from({ length: 64 }, (_, i) => half(-3 + i * 0.095));
  const run = async (f: typeof silu): Promise<number[]> => {
    const g = new GraphBuilder('float16');
    const x = g.input('x', 'float16', [1, 1, xs.length]);
    g.output('y', f(g, x), 'float16', [1, 1, xs.length]);
    return runHalf(g, xs);
  };
  const silus = await run(silu);
  assert.deepEqual(silus.flatMap((y, i) => (y === half(xs[i]! / (1 + Math.exp(-xs[i]!))) ? [] : [xs[i]])), []);
  // gelu_new rounds after each step (NewGELUActivation's), which only the GPU's float16 kernels reproduce
  // (the CPU runs such chains in float32); here: the formula, within float16's error near 1 + tanh's cancellation.
  const gelus = await run(geluTanh);
  const exact = (v: number): number => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
  assert.deepEqual(gelus.flatMap((y, i) => (Math.abs(y - exact(xs[i]!)) <= 2e-3 * Math.max(1, Math.abs(exact(xs[i]!))) ? [] : [xs[i]])), []);
});

/** Each initializer kept in an external data file: its name, file, offset and length. */
function externalWeights(model: string): string[] {
  const graph = onnxProto.onnx.ModelProto.decode(readFileSync(model)).graph!;
  return graph.initializer!.filter((t) => (t.externalData?.length ?? 0) > 0).map((t) => [t.name, ...t.externalData!.map((e) => `${e.key}=${e.value}`)].join(' '));
}

test('float16 builds share one data file between their models and agree with the float32 build', async () => {
  const root = scratchDir('chorus-half-');
  for (const arch of ['gpt2', 'qwen2'] as const) {
    const checkpoint = join(root, `${arch}-ckpt`);
    makeCheckpoint({ arch, size: 'tiny', seed: 3, out: checkpoint });
    buildModel({ source: checkpoint, out: join(root, `${arch}-fp32`) });
    // portable rounds as PyTorch does (constants of its own in each model); cuda is the fused flavor.
    for (const flavor of ['portable', 'cuda'] as const) {
      const dir = join(root, `${arch}-fp16-${flavor}`);
      buildModel({ source: checkpoint, out: dir, flavor, dtype: 'fp16', greedySearch: true, ...(flavor === 'cuda' ? { slotDecoder: true } : {}) });
      // The models read the decoder's data file: each loads only if all laid their weights out alike.
      // The slot and paged decoders, whose attention is the native addon's operator, are checked against
      // the decoder's layout instead: each of their weights where the decoder has it.
      const decoderWeights = new Set(externalWeights(join(dir, 'onnx', 'decoder_model_merged.onnx')));
      for (const model of readdirSync(join(dir, 'onnx')).filter((file) => file.endsWith('.onnx'))) {
        if (model === 'decoder_model_slots.onnx' || model === 'decoder_model_paged.onnx') {
          const weights = externalWeights(join(dir, 'onnx', model));
          assert.ok(weights.length > 0);
          assert.deepEqual(weights.filter((w) => !decoderWeights.has(w)), []);
          continue;
        }
        await (await ort.InferenceSession.create(join(dir, 'onnx', model))).release();
      }
      const [single, half16] = [await DecoderSession.open(join(root, `${arch}-fp32`)), await DecoderSession.open(dir)];
      const step = { inputIds: [[5, 17, 99, 200, 3]] };
      const [a, b] = [await single.run(step), await half16.run(step)];
      let diff = 0;
      for (let i = 0; i < a.logits.length; i++) diff = Math.max(diff, Math.abs(a.logits[i]! - b.logits[i]!));
      assert.ok(diff < 2e-2, `${arch} ${flavor}: float16 logits ${diff} from float32`);
      await single.close();
      await half16.close();
    }
  }
});

test("the cuda flavor's float16 decoder rounds as PyTorch does where it projects with MatMul: q, k and v's bias inside the product, SiLU in float32", () => {
  const root = scratchDir('chorus-half-cuda-');
  const checkpoint = join(root, 'qwen2-ckpt');
  makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 3, out: checkpoint });
  const dir = join(root, 'qwen2-fp16-cuda');
  buildModel({ source: checkpoint, out: dir, flavor: 'cuda', dtype: 'fp16' });
  const graph = onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'decoder_model_merged.onnx'))).graph!;
  const layers = buildSpec<{ numLayers: number }>(dir).numLayers;
  const producer = (name: string): onnxProto.onnx.INodeProto | undefined => graph.node!.find((n) => n.output!.includes(name));
  const consumers = (name: string): onnxProto.onnx.INodeProto[] => graph.node!.filter((n) => n.input!.includes(name));
  // Each layer's packed projection reads its input with a lane of ones, against the bias as a weight row; no Add after it.
  const qkv = graph.node!.filter((n) => n.opType === 'MatMul' && producer(n.input![0]!)?.opType === 'Pad');
  assert.equal(qkv.length, layers);
  for (const node of qkv) assert.deepEqual(consumers(node.output![0]!).map((n) => n.opType), ['Split']);
  // SiLU's Sigmoid reads a float32 copy of the gate, and its product is cast back once.
  const sigmoids = graph.node!.filter((n) => n.opType === 'Sigmoid');
  assert.equal(sigmoids.length, layers);
  for (const node of sigmoids) {
    const cast = producer(node.input![0]!);
    assert.equal(cast?.opType, 'Cast');
    assert.equal(Number(cast!.attribute!.find((a) => a.name === 'to')?.i), 1);
  }
});
