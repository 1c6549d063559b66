/**
 * bf16 builds. ONNX Runtime's CPU provider does not run bfloat16 graphs (nor does onnxruntime-node
 * take bfloat16 tensors), so these check the graphs' structure and the weights' bits; the native
 * engine runs them on GPUs.
 */
import assert from 'node:assert/strict';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import onnxProto from 'onnx-proto';
import { buildModel, makeCheckpoint, readSafetensors, writeSafetensors } from '../../src/modelbuild/index.ts';
import { encodeFloats } from '../../src/modelbuild/float-bits.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { DataType } = onnxProto.onnx.TensorProto;
const root = scratchDir('chorus-bf16-');

function graphOf(file: string): onnxProto.onnx.IGraphProto {
  return onnxProto.onnx.ModelProto.decode(readFileSync(file)).graph!;
}

/** An initializer's bytes, from the model or its external data file. */
function initializerBytes(dir: string, tensor: onnxProto.onnx.ITensorProto): Uint8Array {
  if ((tensor.externalData?.length ?? 0) === 0) return tensor.rawData!;
  const field = (key: string): string => tensor.externalData!.find((e) => e.key === key)!.value!;
  const out = Buffer.alloc(Number(field('length')));
  const fd = openSync(join(dir, 'onnx', field('location')), 'r');
  readSync(fd, out, 0, out.length, Number(field('offset')));
  closeSync(fd);
  return out;
}

/** Bytes as 16-bit words (copied: protobuf's bytes are views into the whole message). */
function bits16(bytes: Uint8Array): Uint16Array {
  return new Uint16Array(new Uint8Array(bytes).buffer);
}

function elemType(value: onnxProto.onnx.IValueInfoProto): number {
  return value.type!.tensorType!.elemType!;
}

test('a bf16 build writes bfloat16 weights and graph inputs and outputs where fp16 writes float16, and keeps a bf16 checkpoint\'s bits', () => {
  const checkpoint = join(root, 'llama');
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 8, out: checkpoint });
  writeSafetensors(join(checkpoint, 'model.safetensors'), readSafetensors(join(checkpoint, 'model.safetensors')), { dtype: 'BF16' });
  const stored = readSafetensors(join(checkpoint, 'model.safetensors'));
  const out = join(root, 'llama-bf16');
  buildModel({ source: checkpoint, out, dtype: 'bf16', flavor: 'cuda', slotDecoder: true });
  assert.equal(buildSpec<{ numLayers: number }>(out).numLayers, 2);
  assert.equal((JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as { torch_dtype: string }).torch_dtype, 'bfloat16');
  assert.equal((JSON.parse(readFileSync(join(out, 'chorus_build.json'), 'utf8')) as { dtype: string }).dtype, 'bf16');

  for (const model of ['decoder_model_merged.onnx', 'decoder_model_slots.onnx']) {
    const graph = graphOf(join(out, 'onnx', model));
    const weights = graph.initializer!.filter((t) => t.name!.endsWith('.weight'));
    assert.ok(weights.length > 10);
    assert.deepEqual(weights.filter((t) => t.dataType !== DataType.BFLOAT16).map((t) => t.name), [], model);
    const floats = [...graph.input!, ...graph.output!].filter((v) => /^(past_key_values|present|logits)/.test(v.name!));
    assert.ok(floats.length > 0);
    assert.deepEqual(floats.filter((v) => elemType(v) !== DataType.BFLOAT16).map((v) => v.name), [], model);
    assert.equal(graph.node!.some((n) => n.opType === 'Cast' && n.attribute!.some((a) => a.name === 'to' && Number(a.i) === DataType.FLOAT16)), false, `${model} casts to float16`);
  }

  // The bits: the embeddings as stored, a projection transposed (MatMul layout), each exactly.
  const graph = graphOf(join(out, 'onnx', 'decoder_model_merged.onnx'));
  const byName = (name: string): onnxProto.onnx.ITensorProto => graph.initializer!.find((t) => t.name === name)!;
  const raw = (name: string): Uint16Array => bits16(encodeFloats(stored.get(name)!.data, 'bfloat16'));
  const embed = bits16(initializerBytes(out, byName('embed_tokens.weight')));
  assert.deepEqual(embed, raw('model.embed_tokens.weight'));
  const gate = byName('layers.1.gate.weight');
  assert.deepEqual(gate.dims!.map(Number), [64, 172]);
  const built = bits16(initializerBytes(out, gate));
  const source = raw('model.layers.1.mlp.gate_proj.weight'); // [172, 64]
  const transposed = new Uint16Array(source.length);
  for (let r = 0; r < 172; r++) for (let c = 0; c < 64; c++) transposed[c * 172 + r] = source[r * 64 + c]!;
  assert.deepEqual(built, transposed);
});

test('an fp32 checkpoint built in bf16 rounds each weight to nearest even once', () => {
  const checkpoint = join(root, 'gpt2');
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 8, out: checkpoint });
  const out = join(root, 'gpt2-bf16');
  buildModel({ source: checkpoint, out, dtype: 'bf16' });
  const graph = graphOf(join(out, 'onnx', 'decoder_model_merged.onnx'));
  const wte = graph.initializer!.find((t) => t.name === 'embed_tokens.weight')!;
  assert.equal(wte.dataType, DataType.BFLOAT16);
  const values = readSafetensors(join(checkpoint, 'model.safetensors')).get('transformer.wte.weight')!.data;
  const bits = bits16(initializerBytes(out, wte));
  const words = new Uint32Array(values.buffer);
  for (let i = 0; i < values.length; i++) {
    const rounded = (words[i]! + 0x7fff + ((words[i]! >>> 16) & 1)) >>> 16;
    assert.equal(bits[i], rounded, `element ${i}`);
  }
});

test('the TypeScript engine\'s sessions refuse a bf16 build, saying where it runs', async () => {
  const checkpoint = join(root, 'gpt2-ts');
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 8, out: checkpoint });
  buildModel({ source: checkpoint, out: `${checkpoint}-onnx`, dtype: 'bf16' });
  await assert.rejects(DecoderSession.open(`${checkpoint}-onnx`), { code: 'CHORUS_UNSUPPORTED', message: /was built in bf16, which runs on GPUs on the native engine only/ });
});

test('bf16 refuses the GreedySearch model, which ONNX Runtime has no bfloat16 for', () => {
  const checkpoint = join(root, 'qwen2');
  makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 8, out: checkpoint });
  assert.throws(() => buildModel({ source: checkpoint, out: join(root, 'qwen2-bf16'), dtype: 'bf16', greedySearch: true }), { code: 'CHORUS_UNSUPPORTED', message: /GreedySearch has no bfloat16/ });
});
