/**
 * Mistral and Gemma 2 on seeded tiny checkpoints: what the builder reads from their configs, the
 * attention attributes of the slot and paged decoders, and the three ways the window is applied (the
 * portable graph's mask, the cuda flavor's bias (also inside ONNX Runtime's GreedySearch), the slot
 * decoder's local_window_size) giving the same outputs on the CPU, which differ from the same weights
 * without the window or the soft cap.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import onnxProto from 'onnx-proto';
import { lastValueFrom, toArray } from 'rxjs';
import { exportGguf } from '../../src/export/gguf/index.ts';
import { NativeEngine, OrtEngine, type NativeEngineOptions } from '../../src/generation/index.ts';
import { architectureFor, buildModel, readSafetensors, type DecoderSpec } from '../../src/modelbuild/index.ts';
import { encodeFloats } from '../../src/modelbuild/float-bits.ts';
import { loadNative } from '../../src/native/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { writeWindowCheckpoint, type WindowArch } from '../helpers/window-checkpoint.ts';

const root = scratchDir('chorus-window-');
const { addon, reason } = loadNative();
/** Longer than the window (8) and the 24 tokens after it: the window moves on every step. */
const PROMPT = [100, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
const STEPS = 24;

function specOf(config: Record<string, unknown>): DecoderSpec {
  const arch = architectureFor(config);
  assert.equal(arch.kind, 'decoder');
  return arch.kind === 'decoder' ? arch.spec(config) : (undefined as never);
}

const GEMMA2 = { model_type: 'gemma2', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32 };

test('mistral: sliding_window windows every layer; null means global attention', () => {
  const base = { model_type: 'mistral', vocab_size: 512, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2 };
  assert.deepEqual(specOf({ ...base, sliding_window: 4096 }).slidingWindow, { size: 4096 });
  assert.equal(specOf({ ...base, sliding_window: null }).slidingWindow, undefined);
  assert.deepEqual(specOf({ ...base, sliding_window: 8, layer_types: ['full_attention', 'sliding_attention'] }).slidingWindow, { size: 8, layers: [false, true] });
  assert.throws(() => specOf({ ...base, sliding_window: 0 }), { code: 'CHORUS_FILE_INVALID', param: 'sliding_window' });
  assert.throws(() => specOf({ ...base, sliding_window: 8, layer_types: ['full_attention'] }), /layer_types must list 2 entries/);
});

test("gemma2: even layers slide unless layer_types says otherwise; scale, caps and head_dim from the config", () => {
  const spec = specOf({ ...GEMMA2, sliding_window: 8, query_pre_attn_scalar: 24, attn_logit_softcapping: 50, final_logit_softcapping: null });
  assert.deepEqual(spec.slidingWindow, { size: 8, layers: [true, false, true, false] });
  assert.equal(spec.headDim, 32);
  assert.equal(spec.attnScale, 24 ** -0.5);
  assert.equal(spec.attnSoftcap, 50);
  assert.equal(spec.finalSoftcap, undefined);
  assert.equal(spec.embedScale, 8);
  assert.equal(spec.mlp, 'gelu_tanh_gated');
  // transformers' defaults: a window of 4096, caps of 50 and 30, a scalar of 256.
  const defaults = specOf(GEMMA2);
  assert.deepEqual([defaults.slidingWindow?.size, defaults.attnSoftcap, defaults.finalSoftcap, defaults.attnScale], [4096, 50, 30, 1 / 16]);
  const types = ['full_attention', 'full_attention', 'sliding_attention', 'full_attention'];
  assert.deepEqual(specOf({ ...GEMMA2, sliding_window: 8, layer_types: types }).slidingWindow, { size: 8, layers: [false, false, true, false] });
  assert.throws(() => specOf({ ...GEMMA2, hidden_activation: 'gelu' }), { code: 'CHORUS_UNSUPPORTED', param: 'hidden_activation' });
  assert.throws(() => specOf({ ...GEMMA2, tie_word_embeddings: false }), { code: 'CHORUS_UNSUPPORTED', param: 'tie_word_embeddings' });
  assert.throws(() => specOf({ ...GEMMA2, rope_scaling: { rope_type: 'linear', factor: 2 } }), { code: 'CHORUS_UNSUPPORTED', param: 'rope_scaling' });
});

function nodesOf(dir: string, model: string, op: string): onnxProto.onnx.INodeProto[] {
  return onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', model))).graph!.node!.filter((n) => n.opType === op);
}

function attributes(node: onnxProto.onnx.INodeProto): Record<string, number> {
  return Object.fromEntries(node.attribute!.filter((a) => ['local_window_size', 'softcap', 'sliding_window'].includes(a.name!)).map((a) => [a.name!, a.type === 1 ? a.f! : Number(a.i)]));
}

test("gemma2's slot decoder gives GroupQueryAttention the window on the windowed layers and the cap on all; the paged decoder gives PagedAttention both", () => {
  const checkpoint = join(root, 'gemma2-attributes');
  writeWindowCheckpoint('gemma2', 3, checkpoint);
  const out = `${checkpoint}-onnx`;
  buildModel({ source: checkpoint, out, flavor: 'cuda', slotDecoder: true });
  assert.deepEqual(nodesOf(out, 'decoder_model_slots.onnx', 'GroupQueryAttention').map(attributes), [
    { local_window_size: 8, softcap: 2 },
    { softcap: 2 },
    { local_window_size: 8, softcap: 2 },
  ]);
  assert.deepEqual(nodesOf(out, 'decoder_model_paged.onnx', 'PagedAttention').map(attributes), [{ sliding_window: 8, softcap: 2 }, { softcap: 2 }, { sliding_window: 8, softcap: 2 }]);
});

test("gemma2's final cap goes into the head's Linear (the addon's projections): no operators after it, the same ids as with them", async () => {
  const checkpoint = join(root, 'gemma2-final-cap');
  writeWindowCheckpoint('gemma2', 3, checkpoint);
  const build = (out: string): string => {
    buildModel({ source: checkpoint, out, flavor: 'cuda', slotDecoder: true, slotLinear: 'addon' });
    return out;
  };
  const folded = build(`${checkpoint}-folded`);
  process.env.CHORUS_FOLD_SOFTCAP = '0';
  let apart: string;
  try {
    apart = build(`${checkpoint}-apart`);
  } finally {
    delete process.env.CHORUS_FOLD_SOFTCAP;
  }
  const cappedHeads = (dir: string, model: string): Array<Record<string, number>> => nodesOf(dir, model, 'Linear').map(attributes).filter((a) => 'softcap' in a);
  for (const model of ['decoder_model_slots.onnx', 'decoder_model_paged.onnx']) {
    assert.deepEqual(cappedHeads(folded, model), [{ softcap: 8 }], model);
    assert.equal(nodesOf(folded, model, 'Tanh').length, 0, model);
    assert.deepEqual(cappedHeads(apart, model), [], model);
    assert.equal(nodesOf(apart, model, 'Tanh').length, 1, model);
  }
  if (addon === undefined) assert.fail(`the native addon: ${reason}`);
  assert.deepEqual(await nativeGreedy(folded), await nativeGreedy(apart));
});

/** The last position's logits after the prompt, and the greedy ids, of a built model on the CPU. */
async function outputs(dir: string): Promise<{ logits: Float32Array; greedy: number[] }> {
  const session = await DecoderSession.open(dir);
  try {
    const out = await session.run({ inputIds: [PROMPT] });
    const V = session.vocabSize;
    return { logits: out.logits.slice((out.dims[1] - 1) * V), greedy: await session.greedy(PROMPT, STEPS) };
  } finally {
    await session.close();
  }
}

/** Writes the checkpoint with `changes` to its config. */
function variant(arch: WindowArch, name: string, changes: Record<string, unknown>): string {
  const dir = join(root, name);
  const config = writeWindowCheckpoint(arch, 5, dir);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, ...changes }));
  return dir;
}

for (const arch of ['mistral', 'gemma2'] as const) {
  test(`${arch}: the portable graph, the cuda flavor and the native slot decoder agree on the CPU, and the window matters`, async () => {
    const checkpoint = variant(arch, arch, {});
    const portable = `${checkpoint}-portable`;
    const cuda = `${checkpoint}-cuda`;
    buildModel({ source: checkpoint, out: portable });
    buildModel({ source: checkpoint, out: cuda, flavor: 'cuda', slotDecoder: true, greedySearch: true });
    const want = await outputs(portable);
    const got = await outputs(cuda);
    assert.deepEqual(got.greedy, want.greedy);
    assert.ok(want.logits.every((v, i) => Math.abs(v - got.logits[i]!) <= 1e-4));
    // ONNX Runtime's GreedySearch around the cuda flavor's decoder (a request that is not streamed).
    const search = await OrtEngine.open(cuda, { greedySearch: true });
    try {
      const events = await lastValueFrom(search.submit({ inputIds: PROMPT, params: { temperature: 0, request_output_len: STEPS, end_id: 511 }, stream: false }).pipe(toArray()));
      assert.deepEqual(events.map((e) => e.token), want.greedy);
    } finally {
      await search.close();
    }

    if (addon === undefined) assert.fail(`the native addon: ${reason}`);
    // The slot decoder, and the paged one where this addon's PagedAttention takes windows and caps.
    for (const options of 'attendRows' in addon ? [{}, { pagedCache: true, blockSize: 4 }] : [{}]) {
      const engine = await NativeEngine.open(cuda, { maxBatchSize: 2, ...options });
      try {
        const run = async (): Promise<number[]> => (await lastValueFrom(engine.submit({ inputIds: PROMPT, params: { temperature: 0, request_output_len: STEPS } }).pipe(toArray()))).map((e) => e.token);
        // Two at once: each row of the batch has its own window.
        assert.deepEqual(await Promise.all([run(), run()]), [want.greedy, want.greedy], JSON.stringify(options));
      } finally {
        await engine.close();
      }
    }

    const global = `${checkpoint}-global`;
    buildModel({ source: variant(arch, `${arch}-global-ckpt`, { sliding_window: null }), out: global });
    assert.notDeepEqual((await outputs(global)).greedy, want.greedy);
    if (arch === 'gemma2') {
      const uncapped = `${checkpoint}-uncapped`;
      buildModel({ source: variant(arch, `${arch}-uncapped-ckpt`, { attn_logit_softcapping: null }), out: uncapped });
      assert.ok((await outputs(uncapped)).logits.some((v, i) => Math.abs(v - want.logits[i]!) > 1e-3));
    }
  });
}

/** The slot decoder's greedy ids through the native engine on the CPU. */
async function nativeGreedy(dir: string, options: NativeEngineOptions = {}): Promise<number[]> {
  const engine = await NativeEngine.open(dir, { maxBatchSize: 2, ...options });
  try {
    return (await lastValueFrom(engine.submit({ inputIds: PROMPT, params: { temperature: 0, request_output_len: STEPS } }).pipe(toArray()))).map((e) => e.token);
  } finally {
    await engine.close();
  }
}

for (const [arch, changes, path] of [
  ['mistral', { num_key_value_heads: 4 }, "MultiHeadAttention (as many kv heads as heads), the window in its bias"],
  ['gemma2', { head_dim: 24 }, 'RotaryEmbedding then GroupQueryAttention (heads of 24), window and cap as attributes'],
] as const) {
  test(`${arch} through ${path}: the portable graph's greedy ids`, async () => {
    if (addon === undefined) assert.fail(`the native addon: ${reason}`);
    const checkpoint = join(root, `${arch}-${Object.values(changes).join('-')}`);
    writeWindowCheckpoint(arch, 5, checkpoint, changes);
    buildModel({ source: checkpoint, out: `${checkpoint}-portable` });
    buildModel({ source: checkpoint, out: `${checkpoint}-cuda`, flavor: 'cuda', slotDecoder: true });
    const want = (await outputs(`${checkpoint}-portable`)).greedy;
    assert.deepEqual((await outputs(`${checkpoint}-cuda`)).greedy, want);
    assert.deepEqual(await nativeGreedy(`${checkpoint}-cuda`), want);
  });
}

test("gemma2 in bf16: bfloat16 weights, inputs and outputs in every model, Gemma's norms stored as 1 + weight", () => {
  const checkpoint = join(root, 'gemma2-bf16');
  writeWindowCheckpoint('gemma2', 4, checkpoint);
  const out = `${checkpoint}-onnx`;
  buildModel({ source: checkpoint, out, dtype: 'bf16', flavor: 'cuda', slotDecoder: true });
  const { DataType } = onnxProto.onnx.TensorProto;
  for (const model of ['decoder_model_merged.onnx', 'decoder_model_slots.onnx', 'decoder_model_paged.onnx']) {
    const graph = onnxProto.onnx.ModelProto.decode(readFileSync(join(out, 'onnx', model))).graph!;
    const weights = graph.initializer!.filter((t) => t.name!.endsWith('.weight'));
    // Per layer: q, k, v, o, gate, up, down and four norms; then the embeddings and the final norm.
    assert.equal(weights.length, 3 * 11 + 2, model);
    assert.deepEqual(weights.filter((t) => t.dataType !== DataType.BFLOAT16).map((t) => t.name), [], model);
    const floats = [...graph.input!, ...graph.output!].filter((v) => /^(past_key_values|present|logits)/.test(v.name!));
    assert.deepEqual(floats.filter((v) => v.type!.tensorType!.elemType !== DataType.BFLOAT16).map((v) => v.name), [], model);
    assert.equal(graph.node!.some((n) => n.opType === 'Cast' && n.attribute!.some((a) => a.name === 'to' && Number(a.i) === DataType.FLOAT16)), false, model);
  }
  // Small weights stay in the model file: a norm's bits are the checkpoint's weight plus one, in bfloat16.
  const graph = onnxProto.onnx.ModelProto.decode(readFileSync(join(out, 'onnx', 'decoder_model_merged.onnx'))).graph!;
  const norm = graph.initializer!.find((t) => t.name === 'layers.1.post_attention_norm.weight')!;
  const stored = readSafetensors(join(checkpoint, 'model.safetensors')).get('model.layers.1.post_attention_layernorm.weight')!.data;
  assert.deepEqual(new Uint8Array(norm.rawData!), encodeFloats(stored.map((w) => w + 1), 'bfloat16'));
});

test("gemma2 in fp16: its norms fold into the addon's Linear (post-norms and the head's included), the same greedy ids as apart", async () => {
  if (addon === undefined) assert.fail(`the native addon: ${reason}`);
  const checkpoint = join(root, 'gemma2-fp16-folds');
  writeWindowCheckpoint('gemma2', 8, checkpoint);
  const previous = process.env.CHORUS_FOLD_NORMS;
  const built: Record<string, string> = {};
  try {
    for (const setting of ['default', '0']) {
      if (setting === 'default') delete process.env.CHORUS_FOLD_NORMS;
      else process.env.CHORUS_FOLD_NORMS = setting;
      built[setting] = `${checkpoint}-${setting}`;
      buildModel({ source: checkpoint, out: built[setting]!, dtype: 'fp16', flavor: 'cuda', slotDecoder: true });
    }
  } finally {
    if (previous === undefined) delete process.env.CHORUS_FOLD_NORMS;
    else process.env.CHORUS_FOLD_NORMS = previous;
  }
  const ops = (dir: string): string[] => onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!.map((n) => n.opType!);
  const folded = ops(built.default!);
  assert.deepEqual(folded.filter((op) => /Normalization|^Slice$/.test(op)), [], 'no norm or Slice left beside the Linear operators');
  const apart = ops(built['0']!);
  // Four norms a layer apart (the first input norm plain, the rest with the residual) and the final norm.
  assert.equal(apart.filter((op) => /Normalization/.test(op)).length, 4 * 3 + 1);
  const linears = onnxProto.onnx.ModelProto.decode(readFileSync(join(built.default!, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!.filter((n) => n.opType === 'Linear');
  assert.equal(linears.filter((n) => (n.input![5] ?? '') !== '').length, 2 * 3, "each layer's two post-norms in the Linear after them");
  // The head: the last position, the final norm inside, and the last layer's post-feedforward norm too.
  const head = linears[linears.length - 1]!;
  assert.equal(Number(head.attribute!.find((a) => a.name === 'last')?.i), 1);
  assert.equal(head.input![4], 'final_norm.weight');
  assert.equal(head.input![5], 'layers.2.post_mlp_norm.weight');
  // Then each row's last_index, after the post-norm the fold put in.
  assert.equal(head.input![6], 'last_index');
  const want = await nativeGreedy(built['0']!);
  assert.equal(want.length, STEPS);
  assert.deepEqual(await nativeGreedy(built.default!), want);
});

test('GGUF export refuses gemma2 by name, before it reads a tokenizer', () => {
  const checkpoint = join(root, 'gemma2-gguf');
  writeWindowCheckpoint('gemma2', 6, checkpoint);
  assert.throws(() => exportGguf({ source: checkpoint, out: join(root, 'gemma2.gguf') }), { code: 'CHORUS_UNSUPPORTED', param: 'model_type', message: /does not cover gemma2/ });
});
