import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { architectureFor, buildModel, makeCheckpoint, readSafetensors, writeSafetensors, type DecoderSpec, type Tensor } from '../../src/modelbuild/index.ts';
import type { DecoderArchitecture } from '../../src/modelbuild/arch/index.ts';
import { rotarySlotAttentionInAddon } from '../../src/modelbuild/decoder-graph.ts';
import { MODERN_ARCHS, MODERN_CONFIGS, modernCheckpoint } from '../../src/modelbuild/make-modern-checkpoint.ts';
import { inverseFrequencies } from '../../src/modelbuild/rope-frequencies.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-modern-archs-');

function readConfig(dir: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
}

function editConfig(dir: string, edit: (config: Record<string, unknown>) => void): void {
  const config = readConfig(dir);
  edit(config);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
}

/** The prefill's logits of `prompt` from a built model. */
async function prefillLogits(dir: string, prompt: number[]): Promise<Float32Array> {
  const session = await DecoderSession.open(dir);
  try {
    return (await session.run({ inputIds: [prompt] })).logits;
  } finally {
    await session.close();
  }
}

test('make-checkpoint writes each new family in the Hugging Face layout, the same bytes for the same seed', () => {
  const familyTensors: Record<(typeof MODERN_ARCHS)[number], string[]> = {
    llama3: ['model.layers.1.self_attn.q_proj.weight'],
    qwen3: ['model.layers.1.self_attn.q_norm.weight', 'model.layers.1.self_attn.k_norm.weight'],
    mistral: ['model.layers.1.self_attn.k_proj.weight', 'lm_head.weight'],
    phi3: ['model.layers.1.self_attn.qkv_proj.weight', 'model.layers.1.mlp.gate_up_proj.weight'],
    gemma2: ['model.layers.3.pre_feedforward_layernorm.weight', 'model.layers.3.post_feedforward_layernorm.weight'],
  };
  const modelTypes = { llama3: 'llama', qwen3: 'qwen3', mistral: 'mistral', phi3: 'phi3', gemma2: 'gemma2' };
  for (const arch of MODERN_ARCHS) {
    const [a, b] = [join(root, `${arch}-a`), join(root, `${arch}-b`)];
    makeCheckpoint({ arch, size: 'tiny', seed: 4, out: a });
    makeCheckpoint({ arch, size: 'tiny', seed: 4, out: b });
    assert.equal(readConfig(a).model_type, modelTypes[arch]);
    assert.deepEqual(readFileSync(join(a, 'model.safetensors')), readFileSync(join(b, 'model.safetensors')), arch);
    const names = [...readSafetensors(join(a, 'model.safetensors')).keys()];
    for (const name of familyTensors[arch]) assert.ok(names.includes(name), `${arch}: ${name}`);
  }
  assert.equal(readConfig(join(root, 'qwen3-a')).head_dim, 32);
  assert.deepEqual((readConfig(join(root, 'llama3-a')).rope_scaling as { rope_type: string }).rope_type, 'llama3');
});

test("make-checkpoint writes the tensor names transformers writes for each family (its fixtures')", () => {
  for (const arch of MODERN_ARCHS) {
    const names = [...readSafetensors(join(ROOT, 'test/fixtures/arch', arch, 'model.safetensors')).keys()].sort();
    assert.deepEqual([...modernCheckpoint(arch, 'tiny', 0).tensors.keys()].sort(), names, arch);
  }
});

test('the real shapes have the parameter counts of the models they stand for', () => {
  // Llama-3.2-1B, Qwen3-1.7B (tied: 1.4B outside the embeddings), Mistral-7B-v0.1, Phi-3-mini-4k, Gemma-2-2B.
  const expected = { llama3: 1_235_814_400, qwen3: 1_720_574_976, mistral: 7_241_732_096, phi3: 3_821_079_552, gemma2: 2_614_341_888 };
  for (const arch of MODERN_ARCHS) {
    let count = 0;
    for (const tensor of modernCheckpoint(arch, 'real', 0).tensors.values()) count += tensor.dims.reduce((x, y) => x * y, 1);
    assert.equal(count, expected[arch], arch);
  }
});

test("the real shapes' configs read as the released models': Llama 3.2's scaling, Qwen3's norms and heads, Phi-3's window", () => {
  const spec = (arch: 'llama3' | 'qwen3' | 'phi3'): DecoderSpec => {
    const { config } = modernCheckpoint(arch, 'real', 0);
    const architecture = architectureFor(config);
    assert.equal(architecture.kind, 'decoder');
    return (architecture as DecoderArchitecture).spec(config);
  };
  assert.deepEqual(spec('llama3').positions, { kind: 'rotary', theta: 500000, scaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 } });
  const qwen3 = spec('qwen3');
  assert.deepEqual([qwen3.qkNorm, qwen3.numHeads, qwen3.numKvHeads, qwen3.headDim, qwen3.slidingWindow], [true, 16, 8, 128, undefined]);
  const phi3 = spec('phi3');
  assert.deepEqual([phi3.numHeads, phi3.numKvHeads, phi3.headDim, phi3.slidingWindow], [32, 32, 96, { size: 2047 }]);
});

test('make-checkpoint --dtype writes half-precision tensors and says so in torch_dtype', () => {
  const dir = join(root, 'qwen3-bf16');
  makeCheckpoint({ arch: 'qwen3', size: 'tiny', seed: 4, out: dir, dtype: 'bf16' });
  assert.equal(readConfig(dir).torch_dtype, 'bfloat16');
  assert.ok([...readSafetensors(join(dir, 'model.safetensors')).values()].every((t) => t.dtype === 'BF16'));
});

test("Llama 3's inverse frequencies: high frequencies kept, low ones divided by the factor, those between blended", () => {
  const spec = (scaling?: Extract<DecoderSpec['positions'], { kind: 'rotary' }>['scaling']): DecoderSpec => ({
    vocabSize: 8, hiddenSize: 128, numLayers: 1, numHeads: 1, numKvHeads: 1, headDim: 128, norm: 'rmsnorm', normEps: 1e-5, mlp: 'silu_gated', maxPositions: 8,
    positions: { kind: 'rotary', theta: 500000, ...(scaling === undefined ? {} : { scaling }) },
  });
  const plain = inverseFrequencies(spec());
  const scaled = inverseFrequencies(spec({ type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 }));
  let [kept, divided, blended] = [0, 0, 0];
  plain.forEach((inv, i) => {
    const wavelength = (2 * Math.PI) / inv;
    if (wavelength < 8192 / 4) {
      assert.equal(scaled[i], inv);
      kept++;
    } else if (wavelength > 8192) {
      assert.ok(Math.abs(scaled[i]! - inv / 8) <= 1e-7 * inv, `${i}`);
      divided++;
    } else {
      const smooth = (8192 / wavelength - 1) / 3;
      assert.ok(Math.abs(scaled[i]! - ((1 - smooth) * inv) / 8 - smooth * inv) <= 1e-6 * inv, `${i}`);
      blended++;
    }
  });
  assert.ok(kept > 0 && divided > 0 && blended > 0, `${kept} kept, ${divided} divided, ${blended} blended`);
  // Llama 3.1's 64 frequencies: wavelengths below 2048 kept (i < 29), above 8192 divided (i >= 35).
  assert.deepEqual([kept, blended, divided], [29, 6, 29]);
});

test("Phi-3's fused qkv_proj and gate_up_proj build the model their split projections build", async () => {
  const phi3 = join(root, 'phi3-split');
  makeCheckpoint({ arch: 'phi3', size: 'tiny', seed: 9, out: phi3 });
  const config = readConfig(phi3);
  const [heads, kvHeads, hidden, intermediate] = [4, 2, 64, 128];
  const headDim = hidden / heads;
  const fused = readSafetensors(join(phi3, 'model.safetensors'));
  const rowsOf = (tensor: Tensor, start: number, count: number): Tensor => ({ dims: [count, hidden], data: tensor.data.slice(start * hidden, (start + count) * hidden) });
  const split = new Map<string, Tensor>();
  for (const [name, tensor] of fused) {
    if (name.endsWith('qkv_proj.weight')) {
      const p = name.replace('qkv_proj.weight', '');
      split.set(`${p}q_proj.weight`, rowsOf(tensor, 0, heads * headDim));
      split.set(`${p}k_proj.weight`, rowsOf(tensor, heads * headDim, kvHeads * headDim));
      split.set(`${p}v_proj.weight`, rowsOf(tensor, (heads + kvHeads) * headDim, kvHeads * headDim));
    } else if (name.endsWith('gate_up_proj.weight')) {
      const p = name.replace('gate_up_proj.weight', '');
      split.set(`${p}gate_proj.weight`, rowsOf(tensor, 0, intermediate));
      split.set(`${p}up_proj.weight`, rowsOf(tensor, intermediate, intermediate));
    } else {
      split.set(name, { dims: tensor.dims, data: tensor.data });
    }
  }
  const llama = join(root, 'phi3-as-llama');
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 1, out: llama });
  writeFileSync(join(llama, 'config.json'), JSON.stringify({ ...config, model_type: 'llama', architectures: ['LlamaForCausalLM'] }));
  writeSafetensors(join(llama, 'model.safetensors'), split);
  buildModel({ source: phi3, out: `${phi3}-onnx` });
  buildModel({ source: llama, out: `${llama}-onnx` });
  assert.deepEqual(buildSpec<DecoderSpec>(`${phi3}-onnx`).slidingWindow, { size: 255 });
  const prompt = [5, 60, 7, 300, 2, 41];
  assert.deepEqual(await prefillLogits(`${phi3}-onnx`, prompt), await prefillLogits(`${llama}-onnx`, prompt));
});

test("Qwen3's q and k are normed per head: scaling one head's q projection leaves the logits as they were; as llama the checkpoint does not build (its norms unused)", async () => {
  const dir = join(root, 'qwen3-norms');
  makeCheckpoint({ arch: 'qwen3', size: 'tiny', seed: 2, out: dir });
  buildModel({ source: dir, out: `${dir}-onnx` });
  const prompt = [9, 8, 70, 6];
  const before = await prefillLogits(`${dir}-onnx`, prompt);
  // The RMSNorm of a head does not depend on its input's scale: scaling the rows of q_proj that make
  // head 0 (head_dim 32, rows of 64) leaves the model unchanged, which a norm over all heads would not.
  const tensors = readSafetensors(join(dir, 'model.safetensors'));
  const scaleHead0 = (data: Float32Array): Float32Array => data.map((x, i) => (i < 32 * 64 ? x * 4 : x));
  const scaled = new Map<string, Tensor>([...tensors].map(([name, t]) => [name, { dims: t.dims, data: name.endsWith('q_proj.weight') ? scaleHead0(t.data) : t.data }]));
  writeSafetensors(join(dir, 'model.safetensors'), scaled);
  buildModel({ source: dir, out: `${dir}-scaled` });
  const after = await prefillLogits(`${dir}-scaled`, prompt);
  after.forEach((x, i) => assert.ok(Math.abs(x - before[i]!) <= 1e-4, `logit ${i}: ${x} vs ${before[i]}`));
  editConfig(dir, (c) => {
    c.model_type = 'llama';
  });
  assert.throws(() => buildModel({ source: dir, out: `${dir}-llama` }), { code: 'CHORUS_FILE_INVALID', message: /not used by the architecture: .*q_norm/ });
});

test('an unknown model_type and a 128k Phi-3 (longrope) fail the build naming them and what is supported', () => {
  const dir = join(root, 'phi3-refused');
  makeCheckpoint({ arch: 'phi3', size: 'tiny', seed: 2, out: dir });
  editConfig(dir, (c) => {
    c.rope_scaling = { type: 'longrope', short_factor: [1], long_factor: [4], original_max_position_embeddings: 64 };
  });
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { code: 'CHORUS_UNSUPPORTED', message: /rope_scaling of type "longrope" is not supported; supported: default, llama3/ });
  editConfig(dir, (c) => {
    c.rope_scaling = null;
    c.model_type = 'phimoe';
  });
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { code: 'CHORUS_UNSUPPORTED', param: 'model_type', message: /model_type "phimoe" is not supported; supported: .*qwen3, phi3/ });
});

test("the slot decoder's attention: PagedAttention by default for fp16 and bf16 q/k norms and heads of 64, 96, 128 or 256, for every rotary model when asked, never in fp32", () => {
  const spec = (arch: (typeof MODERN_ARCHS)[number], size: 'tiny' | 'real'): DecoderSpec => {
    const config = MODERN_CONFIGS[arch][size];
    return (architectureFor(config) as DecoderArchitecture).spec(config);
  };
  // The real shapes: Llama-3.2-1B (heads of 64), Qwen3-1.7B (128, norms), Mistral-7B (128), Phi-3-mini (96), Gemma-2-2B (256).
  const chosen = (size: 'tiny' | 'real', floatType: 'float16' | 'bfloat16' | 'float32', attention: 'addon' | 'GroupQueryAttention' | 'PagedAttention'): Record<string, boolean> =>
    Object.fromEntries(MODERN_ARCHS.map((arch) => [arch, rotarySlotAttentionInAddon(spec(arch, size), floatType, attention)]));
  assert.deepEqual(chosen('real', 'float16', 'addon'), { llama3: true, qwen3: true, mistral: true, phi3: true, gemma2: true });
  assert.deepEqual(chosen('real', 'bfloat16', 'addon'), { llama3: true, qwen3: true, mistral: true, phi3: true, gemma2: true });
  assert.deepEqual(chosen('real', 'float16', 'PagedAttention'), { llama3: true, qwen3: true, mistral: true, phi3: true, gemma2: true });
  assert.deepEqual(chosen('real', 'float16', 'GroupQueryAttention'), { llama3: false, qwen3: false, mistral: false, phi3: false, gemma2: false });
  assert.deepEqual(chosen('real', 'float32', 'PagedAttention'), { llama3: false, qwen3: false, mistral: false, phi3: false, gemma2: false });
  assert.deepEqual(chosen('tiny', 'float16', 'addon'), { llama3: false, qwen3: true, mistral: false, phi3: false, gemma2: false });
  // Groups past the tensor-core kernel's 16 query heads a key head keep GroupQueryAttention by default.
  const llama = spec('llama3', 'real');
  assert.equal(rotarySlotAttentionInAddon({ ...llama, numHeads: 32, numKvHeads: 2 }, 'float16', 'addon'), true);
  assert.equal(rotarySlotAttentionInAddon({ ...llama, numHeads: 64, numKvHeads: 2 }, 'float16', 'addon'), false);
});
