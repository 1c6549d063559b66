import assert from 'node:assert/strict';
import onnxProto from 'onnx-proto';
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, nativeUnavailable, OrtEngine, greedy, Seq2SeqEngine, type Engine, type NativeEngineOptions, type SamplingParams, type TokenEvent } from '../../src/generation/index.ts';
import { BeamSequence } from '../../src/generation/core/beam-sequence.ts';
import { Sequence } from '../../src/generation/core/sequence.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative, MAX_TOP_LOGPROBS, type NativeBeamGroup } from '../../src/native/index.ts';
import { toHalfBits } from '../../src/util/half.ts';
import { uniformStream } from '../../src/util/random.ts';
import { STORIES } from '../helpers/paths.ts';
import { buildSpec } from '../helpers/build-info.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { STAGGERED_PROMPTS, staggeredAlone, staggeredParams, staggeredTogether } from '../helpers/staggered.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-native-');
const dirs = { stories: join(root, 'stories'), gpt2: join(root, 'gpt2'), qwen2: join(root, 'qwen2'), llama: join(root, 'llama') };

function run(engine: Engine, inputIds: number[], params: SamplingParams, stream = true): Promise<TokenEvent[]> {
  return lastValueFrom(engine.submit({ inputIds, params, stream }).pipe(toArray()));
}

/** The same tokens, beams and finish reasons as `want`, log-probabilities and top_logprobs within 1e-4. */
function assertSameEvents(got: TokenEvent[][], want: TokenEvent[][]): void {
  for (const [i, events] of got.entries()) {
    assert.deepEqual(events.map((e) => [e.token, e.sequence, e.finishReason]), want[i]!.map((e) => [e.token, e.sequence, e.finishReason]), `request ${i}`);
    for (const [j, e] of events.entries()) {
      if (e.logProb !== undefined) assert.ok(Math.abs(e.logProb - want[i]![j]!.logProb!) < 1e-4, `request ${i} log-probability ${j}`);
      const top = want[i]![j]!.topLogProbs;
      assert.deepEqual(e.topLogProbs?.map((t) => t.token), top?.map((t) => t.token), `request ${i} top_logprobs ${j}`);
      e.topLogProbs?.forEach((t, k) => assert.ok(Math.abs(t.logProb - top![k]!.logProb) < 1e-4, `request ${i} top_logprobs ${j}.${k}`));
    }
  }
}

type Mix = Array<{ prompt: number[]; params: SamplingParams }>;

/**
 * `mix` through `native` (its requests `staggerMs` apart) and through `reference`: the same events,
 * every request finished and none left running.
 */
async function assertMixAsReference(native: Engine, reference: Engine, mix: Mix, staggerMs = 0): Promise<void> {
  const submit = (r: Mix[number], i: number): Promise<TokenEvent[]> =>
    staggerMs === 0 ? run(native, r.prompt, r.params) : new Promise<void>((resolve) => setTimeout(resolve, i * staggerMs)).then(() => run(native, r.prompt, r.params));
  const got = await Promise.all(mix.map(submit));
  const want = await Promise.all(mix.map((r) => run(reference, r.prompt, r.params)));
  assertSameEvents(got, want);
  assert.equal(native.stats().requestsFinished, mix.length);
  assert.equal(native.stats().running, 0);
}

/**
 * On an engine of two slots: a stream cancelled after 5 tokens leaves its slot to a waiting request,
 * and two greedy requests of `length` tokens beside it get the tokens they get alone.
 */
async function cancelledStreamLeavesItsSlot(engine: Engine, length: number): Promise<void> {
  const alone = (await run(engine, [6, 7], { temperature: 0, request_output_len: length })).map((e) => e.token);
  const seen: TokenEvent[] = [];
  const subscription = engine.submit({ inputIds: [3, 4, 5], params: { temperature: 0, request_output_len: length + 10 } }).subscribe((e) => {
    seen.push(e);
    if (seen.length === 5) subscription.unsubscribe();
  });
  const other = run(engine, [6, 7], { temperature: 0, request_output_len: length });
  // A third request waits for a slot: the cancelled one's.
  const third = run(engine, [6, 7], { temperature: 0, request_output_len: length });
  assert.deepEqual((await other).map((e) => e.token), alone);
  assert.deepEqual((await third).map((e) => e.token), alone);
  assert.equal(seen.length, 5);
  assert.equal(engine.stats().requestsCancelled, 1);
  // The finished requests go when the run that took their last tokens returns.
  await settled(() => engine.stats().running + engine.stats().waiting === 0);
  assert.equal(engine.stats().running + engine.stats().waiting, 0);
}

/** Waits (up to 2 s) until `done()` holds: the engine's loop lets requests go after the run under way. */
async function settled(done: () => boolean): Promise<void> {
  for (let turn = 0; turn < 400 && !done(); turn++) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('chorus build --slot-decoder', () => {
  test('writes the slot decoder beside the decoder, sharing its weights file', () => {
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 9, out: join(root, 'gpt2-build-ckpt') });
    const out = join(root, 'gpt2-build');
    buildModel({ source: join(root, 'gpt2-build-ckpt'), out, flavor: 'cuda', slotDecoder: true });
    assert.ok(existsSync(join(out, 'onnx', 'decoder_model_slots.onnx')));
    assert.ok(existsSync(join(out, 'onnx', 'decoder_model_merged.onnx_data')));
    assert.equal(existsSync(join(out, 'onnx', 'decoder_model_slots.onnx_data')), false);
    assert.equal((JSON.parse(readFileSync(join(out, 'chorus_build.json'), 'utf8')) as { slotDecoder?: boolean }).slotDecoder, true);
  });

  test("attends through the addon's DecoderSlotAttention (q, k and v in one projection, the bias inside), rotary models through GroupQueryAttention", () => {
    const nodesOf = (dir: string): onnxProto.onnx.INodeProto[] => onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    const opsOf = (dir: string): string[] => nodesOf(dir).map((n) => `${n.domain ?? ''}.${n.opType}`);
    const layersOf = (dir: string): number => buildSpec<{ numLayers: number }>(dir).numLayers;
    const gpt2 = opsOf(join(root, 'gpt2-build'));
    assert.equal(gpt2.filter((op) => op === 'chorus.DecoderSlotAttention').length, layersOf(join(root, 'gpt2-build')));
    // GPT-2's q, k and v biases go into the operator (its fifth input), fed by the packed projection's MatMul.
    for (const node of nodesOf(join(root, 'gpt2-build')).filter((n) => n.opType === 'DecoderSlotAttention')) {
      assert.equal(node.input!.length, 5);
      assert.equal(nodesOf(join(root, 'gpt2-build')).find((n) => n.output!.includes(node.input![0]!))?.opType, 'MatMul');
    }
    assert.equal(gpt2.filter((op) => op.endsWith('GroupQueryAttention')).length, 0);
    makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 9, out: join(root, 'qwen2-build-ckpt') });
    buildModel({ source: join(root, 'qwen2-build-ckpt'), out: join(root, 'qwen2-build'), flavor: 'cuda', slotDecoder: true });
    const qwen2 = opsOf(join(root, 'qwen2-build'));
    assert.equal(qwen2.filter((op) => op === 'com.microsoft.GroupQueryAttention').length, layersOf(join(root, 'qwen2-build')));
    assert.equal(qwen2.filter((op) => op.endsWith('DecoderSlotAttention')).length, 0);
  });

  test('fp16 Qwen3 slot decoders attend through PagedAttention over the slots (no block table, the q/k norms inside); Qwen2 through GroupQueryAttention', () => {
    makeCheckpoint({ arch: 'qwen2', size: 'tiny', seed: 21, out: join(root, 'qwen2-fp16-slots-ckpt') });
    buildModel({ source: join(root, 'qwen2-fp16-slots-ckpt'), out: join(root, 'qwen2-fp16-slots'), flavor: 'cuda', slotDecoder: true, dtype: 'fp16' });
    const qwen2 = onnxProto.onnx.ModelProto.decode(readFileSync(join(root, 'qwen2-fp16-slots', 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    assert.equal(qwen2.filter((n) => n.opType === 'GroupQueryAttention').length, buildSpec<{ numLayers: number }>(join(root, 'qwen2-fp16-slots')).numLayers);
    assert.equal(qwen2.filter((n) => n.opType === 'PagedAttention').length, 0);
    for (const [arch, seed] of [['qwen3', 22]] as const) {
      const dir = join(root, `${arch}-fp16-slots`);
      makeCheckpoint({ arch, size: 'tiny', seed, out: `${dir}-ckpt` });
      buildModel({ source: `${dir}-ckpt`, out: dir, flavor: 'cuda', slotDecoder: true, dtype: 'fp16' });
      const model = onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))).graph!;
      const attention = model.node!.filter((n) => n.opType === 'PagedAttention');
      assert.equal(attention.length, buildSpec<{ numLayers: number }>(dir).numLayers);
      assert.equal(model.node!.filter((n) => n.opType === 'GroupQueryAttention').length, 0);
      for (const node of attention) {
        // qkv, the caches, seqlens_k, no block table, cos and sin, no bias, then the norms.
        assert.equal(node.input![4], '');
        assert.match(node.input![5]!, /cos/);
        assert.deepEqual([node.input!.length, node.input![7]], [10, '']);
        assert.match(node.input![8]!, /q_norm/);
        assert.match(node.input![9]!, /k_norm/);
        assert.ok(node.attribute!.some((a) => a.name === 'epsilon'), arch);
      }
      // Qwen3's per-head norms are inside the operator, and the first layer's input norm inside its Linear.
      assert.equal(model.node!.filter((n) => n.opType === 'SimplifiedLayerNormalization').length, 0);
    }
  });

  test("slotAttention PagedAttention takes every fp16 rotary model through PagedAttention over the slots (Qwen2's bias inside); GPT-2 keeps DecoderSlotAttention, fp32 GroupQueryAttention", () => {
    const opsOf = (dir: string): onnxProto.onnx.INodeProto[] => onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    const layersOf = (dir: string): number => buildSpec<{ numLayers: number }>(dir).numLayers;
    const qwen2 = join(root, 'qwen2-fp16-paged-attention');
    buildModel({ source: join(root, 'qwen2-fp16-slots-ckpt'), out: qwen2, flavor: 'cuda', slotDecoder: true, dtype: 'fp16', slotAttention: 'PagedAttention' });
    const attention = opsOf(qwen2).filter((n) => n.opType === 'PagedAttention');
    assert.equal(attention.length, layersOf(qwen2));
    assert.equal(opsOf(qwen2).filter((n) => n.opType === 'GroupQueryAttention').length, 0);
    for (const node of attention) {
      // qkv, the caches, seqlens_k, no block table, cos and sin, the qkv bias; no norms.
      assert.equal(node.input!.length, 8);
      assert.equal(node.input![4], '');
      assert.match(node.input![5]!, /cos/);
      assert.match(node.input![7]!, /bias/);
    }
    const gpt2 = join(root, 'gpt2-fp16-paged-attention');
    buildModel({ source: join(root, 'gpt2-build-ckpt'), out: gpt2, flavor: 'cuda', slotDecoder: true, dtype: 'fp16', slotAttention: 'PagedAttention' });
    assert.equal(opsOf(gpt2).filter((n) => n.opType === 'DecoderSlotAttention').length, layersOf(gpt2));
    const fp32 = join(root, 'qwen2-fp32-paged-attention');
    buildModel({ source: join(root, 'qwen2-fp16-slots-ckpt'), out: fp32, flavor: 'cuda', slotDecoder: true, slotAttention: 'PagedAttention' });
    assert.equal(opsOf(fp32).filter((n) => n.opType === 'GroupQueryAttention').length, layersOf(fp32));
    // An attention the build does not know is refused by name, not built as the default.
    assert.throws(
      () => buildModel({ source: join(root, 'qwen2-fp16-slots-ckpt'), out: join(root, 'qwen2-bad-attention'), flavor: 'cuda', slotDecoder: true, slotAttention: 'paged' as 'addon' }),
      /slotAttention must be one of addon, GroupQueryAttention, PagedAttention, got "paged"/,
    );
  });

  test("projects through the addon's Linear in float16 (gelu_new inside, the head's weight as it is), MatMul in float32", () => {
    const out = join(root, 'gpt2-build-fp16');
    buildModel({ source: join(root, 'gpt2-build-ckpt'), out, flavor: 'cuda', dtype: 'fp16', slotDecoder: true });
    const nodes = onnxProto.onnx.ModelProto.decode(readFileSync(join(out, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    const layers = buildSpec<{ numLayers: number }>(out).numLayers;
    const linears = nodes.filter((n) => n.domain === 'chorus' && n.opType === 'Linear');
    // q, k and v in one, the output projection, the MLP's two (gelu_new inside the first), the head.
    assert.equal(linears.length, 4 * layers + 1);
    const activation = (n: onnxProto.onnx.INodeProto): string => Buffer.from(n.attribute?.find((a) => a.name === 'activation')?.s ?? new Uint8Array()).toString();
    assert.equal(linears.filter((n) => activation(n) === 'gelu_tanh').length, layers);
    assert.deepEqual(
      nodes.filter((n) => ['MatMul', 'Gemm', 'FastGelu'].includes(n.opType!)).map((n) => n.opType),
      [],
    );
    // Biases go where they cost no pass of their own for a GEMM (more rows than the Linear kernel takes):
    // q, k and v's into the attention, the output and down projections' into the fused residual norms.
    for (const node of nodes.filter((n) => n.opType === 'DecoderSlotAttention')) {
      assert.equal(node.input!.length, 5);
      assert.equal(nodes.find((n) => n.output!.includes(node.input![0]!))?.opType, 'Linear');
    }
    assert.equal(nodes.filter((n) => n.opType === 'SkipLayerNormalization' && n.input!.length === 5 && n.input![4]!.endsWith('.bias')).length, 2 * layers);
    assert.equal(linears.filter((n) => n.input!.length === 3).length, layers);
    // The head reads the tied embedding as it is; every other weight goes through a Transpose folded at load.
    const head = linears.find((n) => n.output!.includes(nodes.find((m) => m.output!.includes('logits'))!.input![0]!))!;
    assert.equal(head.input![1], 'embed_tokens.weight');
    assert.equal(linears.filter((n) => nodes.find((m) => m.output!.includes(n.input![1]!))?.opType === 'Transpose').length, 4 * layers);
    const fp32 = onnxProto.onnx.ModelProto.decode(readFileSync(join(root, 'gpt2-build', 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    assert.equal(fp32.filter((n) => n.opType === 'Linear').length, 0);
  });

  test("a gated MLP's gate, SiLU, up projection and product are one gated Linear in float16, its weight the gate's rows then the up's", () => {
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 4, out: join(root, 'llama-gated-ckpt') });
    const out = join(root, 'llama-gated-fp16');
    buildModel({ source: join(root, 'llama-gated-ckpt'), out, flavor: 'cuda', dtype: 'fp16', slotDecoder: true });
    const layers = buildSpec<{ numLayers: number }>(out).numLayers;
    for (const file of ['decoder_model_slots.onnx', 'decoder_model_paged.onnx']) {
      const nodes = onnxProto.onnx.ModelProto.decode(readFileSync(join(out, 'onnx', file))).graph!.node!;
      const gated = nodes.filter((n) => n.opType === 'Linear' && n.attribute?.some((a) => a.name === 'gated' && Number(a.i) === 1));
      assert.equal(gated.length, layers, file);
      for (const node of gated) {
        assert.equal(Buffer.from(node.attribute!.find((a) => a.name === 'activation')!.s!).toString(), 'silu');
        const transpose = nodes.find((n) => n.output!.includes(node.input![1]!))!;
        const concat = nodes.find((n) => n.output!.includes(transpose.input![0]!))!;
        assert.deepEqual(concat.input!.map((name) => name.replace(/^layers\.\d+\./, '')), ['gate.weight', 'up.weight']);
      }
      // q, k and v in one, the output projection, the gated MLP's one and the down projection; the head.
      assert.equal(nodes.filter((n) => n.opType === 'Linear').length, 4 * layers + 1, file);
      const linearOutputs = new Set(nodes.filter((n) => n.opType === 'Linear').flatMap((n) => n.output!));
      assert.equal(nodes.filter((n) => n.opType === 'Mul' && n.input!.some((name) => linearOutputs.has(name))).length, 0, file);
      // Each layer's two RMSNorms go into the Linear after them (q, k and v's; the gated MLP's), the
      // first without a residual, and the final norm into the head, which takes the last position
      // itself (no Slice): no norm keeps a kernel of its own.
      const normed = nodes.filter((n) => n.opType === 'Linear' && (n.input![4] ?? '') !== '');
      assert.equal(normed.length, 2 * layers + 1, file);
      assert.equal(normed.filter((n) => n.input![3] === '').length, 1, file);
      const norms = Array.from({ length: layers }, () => ['input_norm.weight', 'post_norm.weight']).flat();
      assert.deepEqual(normed.map((n) => n.input![4]!.replace(/^layers\.\d+\./, '')), [...norms, 'final_norm.weight'], file);
      const head = normed[normed.length - 1]!;
      assert.equal(Number(head.attribute!.find((a) => a.name === 'last')?.i), 1, file);
      assert.equal(head.output!.length, 1, file);
      // The slot decoder's head also takes each row's last_index (one-run ragged prefills); the paged one's does not.
      assert.deepEqual(head.input!.slice(5), file === 'decoder_model_slots.onnx' ? ['', 'last_index'] : [], file);
      assert.ok(normed.slice(0, -1).every((n) => n.input!.length === 5), file);
      // Each other one with a residual hands the sum on to the next norm, which reads it as its residual.
      for (const node of normed.slice(0, -1).filter((n) => n.input![3] !== '')) {
        assert.equal(node.output!.length, 2, file);
        assert.ok(nodes.some((n) => n.input!.includes(node.output![1]!) && n.input!.indexOf(node.output![1]!) !== 0), file);
      }
      assert.deepEqual(nodes.filter((n) => /LayerNormalization$|^Slice$/.test(n.opType!)).map((n) => n.opType), [], file);
    }
  });

  test('needs the cuda flavor for a decoder-only model and a decoder to generate with, naming the option', () => {
    const refused = (error: Error & { code?: string; param?: string }): boolean => error.code === 'CHORUS_UNSUPPORTED' && error.param === 'slotDecoder';
    assert.throws(() => buildModel({ source: join(root, 'gpt2-build-ckpt'), out: join(root, 'x'), slotDecoder: true }), refused);
    makeCheckpoint({ arch: 't5', size: 'tiny', seed: 1, out: join(root, 't5-ckpt') });
    assert.throws(() => buildModel({ source: join(root, 't5-ckpt'), out: join(root, 'y'), slotDecoder: true, task: 'encode' }), refused);
  });

  test("an encoder-decoder's float16 slot decoder projects through Linear into SlotAttention, which adds the biases (q, k and v packed)", () => {
    makeCheckpoint({ arch: 'bart', size: 'tiny', seed: 1, out: join(root, 'bart-build-ckpt') });
    const out = join(root, 'bart-build-fp16');
    buildModel({ source: join(root, 'bart-build-ckpt'), out, dtype: 'fp16', slotDecoder: true });
    const nodes = onnxProto.onnx.ModelProto.decode(readFileSync(join(out, 'onnx', 'decoder_model_slots.onnx'))).graph!.node!;
    const layers = buildSpec<{ decoderLayers: number }>(out).decoderLayers;
    const attentions = nodes.filter((n) => n.opType === 'SlotAttention');
    const packed = attentions.filter((n) => n.attribute?.some((a) => a.name === 'qkv_packed' && Number(a.i) === 1));
    assert.equal(packed.length, layers);
    for (const node of attentions) {
      // Self-attention: the packed qkv, then its bias last; cross-attention: the query, then its bias.
      assert.equal(nodes.find((n) => n.output!.includes(node.input![0]!))?.opType, 'Linear');
      assert.equal(node.input!.length, 8);
    }
    assert.deepEqual(
      nodes.filter((n) => ['MatMul', 'Gemm', 'Split', 'Gelu'].includes(n.opType!)).map((n) => n.opType),
      [],
    );
  });

  test("writes an encoder-decoder's slot encoder and decoder beside its models", () => {
    const out = join(root, 't5-build');
    buildModel({ source: join(root, 't5-ckpt'), out, slotDecoder: true });
    for (const file of ['encoder_model.onnx', 'decoder_model_merged.onnx', 'encoder_model_slots.onnx', 'decoder_model_slots.onnx']) assert.ok(existsSync(join(out, 'onnx', file)), file);
    assert.equal((JSON.parse(readFileSync(join(out, 'chorus_build.json'), 'utf8')) as { slotDecoder?: boolean }).slotDecoder, true);
  });
});

describe('the native addon', { skip }, () => {
  test('argmaxRows takes the first maximum of each row, fp32 and fp16, as the TypeScript greedy does', () => {
    const random = uniformStream(11);
    const vocab = 997;
    const rows = 1000;
    const logits = new Float32Array(rows * vocab).map(() => Math.round((random() * 2 - 1) * 64) / 8); // many ties
    const expected = Array.from({ length: rows }, (_, r) => greedy(logits.subarray(r * vocab, (r + 1) * vocab)).token);
    assert.deepEqual([...addon!.argmaxRows(logits, vocab, false)], expected);
    // The same values as fp16 bits (eighths up to 8 are exact in half precision).
    const half = new Uint16Array(logits.length);
    const view = new DataView(new ArrayBuffer(4));
    logits.forEach((x, i) => {
      view.setFloat32(0, x);
      const bits = view.getUint32(0);
      const sign = (bits >>> 16) & 0x8000;
      const exponent = ((bits >>> 23) & 0xff) - 127 + 15;
      half[i] = x === 0 ? sign : sign | (exponent << 10) | ((bits >>> 13) & 0x3ff);
    });
    assert.deepEqual([...addon!.argmaxRows(half, vocab, false)], expected);
    if (addon!.cudaDevices() > 0) {
      assert.deepEqual([...addon!.argmaxRows(logits, vocab, true)], expected);
      assert.deepEqual([...addon!.argmaxRows(half, vocab, true)], expected);
    }
  });

  test('argmaxRows on the GPU: few rows of a large vocabulary (split over a cluster of blocks a row) take the first maximum too', { skip: addon?.cudaDevices() ? false : 'needs a CUDA GPU' }, () => {
    const random = uniformStream(12);
    for (const [rows, vocab] of [[1, 152_001], [5, 128_256], [16, 65_536], [17, 65_537]] as const) {
      // Eighths in [-8, 8]: many ties, within a part of the row and across the parts.
      const logits = new Float32Array(rows * vocab).map(() => Math.round((random() * 2 - 1) * 64) / 8);
      // The maximum late in the row for one row, in its first ids for another.
      logits[vocab - 3] = 9;
      if (rows > 1) logits[vocab + 1] = 9;
      const expected = Array.from({ length: rows }, (_, r) => greedy(logits.subarray(r * vocab, (r + 1) * vocab)).token);
      assert.deepEqual([...addon!.argmaxRows(logits, vocab, true)], expected, `${rows} x ${vocab}, fp32`);
      const half = Uint16Array.from(logits, toHalfBits);
      assert.deepEqual([...addon!.argmaxRows(half, vocab, true)], expected, `${rows} x ${vocab}, fp16`);
    }
  });
});

/** The slot decoder built in gpt2-build (fp32, on the CPU): its spec, and options of 2 slots of `maxLength` positions. */
function gpt2SlotDecoder(maxLength: number) {
  const dir = join(root, 'gpt2-build');
  const spec = buildSpec<{ numLayers: number; numKvHeads: number; headDim: number; vocabSize: number }>(dir);
  const options = { model: join(dir, 'onnx', 'decoder_model_slots.onnx'), provider: 'cpu' as const, slots: 2, maxLength, layers: spec.numLayers, kvHeads: spec.numKvHeads, headDim: spec.headDim, vocab: spec.vocabSize, dtype: 'fp32' as const };
  return { spec, options };
}

describe('the native SlotDecoder', { skip }, () => {
  test('checks its options and its slots, and will not close under a step in flight', async () => {
    const { spec, options } = gpt2SlotDecoder(16);
    assert.throws(() => new addon!.SlotDecoder({ ...options, provider: 'tpu' as 'cpu' }), /provider must be cpu or cuda/);
    assert.throws(() => new addon!.SlotDecoder({ ...options, slots: undefined as unknown as number }), /options.slots is required/);
    const decoder = new addon!.SlotDecoder(options);
    await decoder.load();
    assert.equal(decoder.cacheBytes, 2 * spec.numLayers * 2 * spec.numKvHeads * 16 * spec.headDim * 4);
    await assert.rejects(decoder.prefill(2, Int32Array.from([1, 2]), new Int32Array(0)), /slot 2 is outside 0..1/);
    await assert.rejects(decoder.prefill(0, new Int32Array(17), new Int32Array(0)), /17 tokens does not fit a slot of 16/);
    const first = await decoder.prefill(0, Int32Array.from([5, 6, 7]), Int32Array.from([0]));
    assert.equal(first.logits.length, spec.vocabSize);
    assert.equal(first.argmax[0], greedy(first.logits).token);
    // Prompts of one length in one run: each row as the prompt alone.
    await assert.rejects(decoder.prefill(1, new Int32Array(6), new Int32Array(0), undefined, 2), /2 prompts from slot 1 are outside 0..1/);
    await assert.rejects(decoder.prefill(0, new Int32Array(5), new Int32Array(0), undefined, 2), /5 ids are not 2 rows/);
    const both = await decoder.prefill(0, Int32Array.from([9, 10, 11, 5, 6, 7]), Int32Array.from([1]), undefined, 2);
    assert.equal(both.argmax.length, 2);
    assert.equal(both.argmax[1], first.argmax[0]);
    both.logits.forEach((x, i) => assert.ok(Math.abs(x - first.logits[i]!) < 1e-4, `logit ${i}`));
    await decoder.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0));
    const step = decoder.decode(Int32Array.from([first.argmax[0]!]), Int32Array.from([3]), new Int32Array(0));
    assert.throws(() => decoder.close(), /in flight/);
    assert.equal((await step).argmax.length, 1);
    await assert.rejects(decoder.decode(Int32Array.from([1]), Int32Array.from([16]), new Int32Array(0)), /past its slot's 16/);
    // Beam runs: each group's fields are checked, naming the one at fault.
    const group: NativeBeamGroup = { firstRow: 0, width: 2, outputLength: 8, generated: 1, minLength: 0, endIds: new Int32Array(0), earlyStopping: 0, improvable: true, temperature: 1, lenPenalty: 1, diversityRate: 0, scores: Float64Array.from([0, -1]), finished: new Float64Array(0) };
    const beams = (groups: NativeBeamGroup[], positions = [4, 4]): Promise<unknown> => decoder.decodeBeams(Int32Array.from([5, 6]), Int32Array.from(positions), groups, 2);
    await assert.rejects(beams([{ ...group, width: 11 }]), /width must be 1..10, not 11/);
    await assert.rejects(beams([{ ...group, firstRow: 1 }]), /rows 1..2 are outside the step's 2/);
    await assert.rejects(beams([{ ...group, generated: 0 }]), /generated must be 1..outputLength - 1/);
    await assert.rejects(beams([{ ...group, scores: Float64Array.from([0]) }]), /scores must hold one score per beam/);
    await assert.rejects(beams([group], [4, 5]), /at different positions/);
    await assert.rejects(beams([group, { ...group, width: 1, scores: Float64Array.from([0]) }]), /overlap at row 0/);
    assert.throws(() => beams([{ ...group, scores: [0, 1] as unknown as NativeBeamGroup['scores'] }]), /groups\[0\].scores must be a Float64Array/);
    await decoder.close();
    assert.throws(() => decoder.decode(Int32Array.from([1]), Int32Array.from([3]), new Int32Array(0)), /not loaded/);
  });

  test('prefills prompts of different lengths together in two runs: each row and the step after it as its prompt alone', async () => {
    const { spec, options } = gpt2SlotDecoder(16);
    const V = spec.vocabSize;
    const decoder = new addon!.SlotDecoder(options);
    await decoder.load();
    try {
      for (const prompts of [
        [[5, 6], [9, 10, 11, 12, 13, 14]],
        [[7, 8, 9], [4]],
      ]) {
        const alone: Array<{ first: Float32Array; next: Float32Array; ids: number[] }> = [];
        for (const prompt of prompts) {
          const first = await decoder.prefill(0, Int32Array.from(prompt), Int32Array.from([0]));
          const next = await decoder.decode(Int32Array.from([first.argmax[0]!]), Int32Array.from([prompt.length]), Int32Array.from([0]));
          alone.push({ first: first.logits, next: next.logits, ids: [first.argmax[0]!, next.argmax[0]!] });
        }
        const ragged = await decoder.prefillRagged(0, prompts.map((p) => Int32Array.from(p)), Int32Array.from([0, 1]));
        const next = await decoder.decode(Int32Array.from(ragged.argmax), Int32Array.from(prompts.map((p) => p.length)), Int32Array.from([0, 1]));
        prompts.forEach((prompt, r) => {
          assert.deepEqual([ragged.argmax[r], next.argmax[r]], alone[r]!.ids, `prompt ${prompt}`);
          for (const [got, want] of [
            [ragged.logits.subarray(r * V, (r + 1) * V), alone[r]!.first],
            [next.logits.subarray(r * V, (r + 1) * V), alone[r]!.next],
          ] as const) {
            want.forEach((x, i) => assert.ok(Math.abs(got[i]! - x) < 1e-4, `prompt ${prompt}, logit ${i}: ${got[i]} against ${x}`));
          }
        });
      }
      await assert.rejects(decoder.prefillRagged(1, [Int32Array.from([1]), Int32Array.from([2, 3])], new Int32Array(0)), /2 prompts from slot 1 are outside 0..1/);
      await assert.rejects(decoder.prefillRagged(0, [Int32Array.from([1]), new Int32Array(0)], new Int32Array(0)), /a prompt of 0 tokens does not fit/);
      await assert.rejects(decoder.prefillRagged(0, [new Int32Array(17)], new Int32Array(0)), /17 tokens does not fit a slot of 16/);
    } finally {
      await decoder.close();
    }
  });

  test('hands each greedy step\'s ids to onStep as the run goes, the same ids the run returns', async () => {
    const decoder = new addon!.SlotDecoder(gpt2SlotDecoder(32).options);
    await decoder.load();
    const first = await decoder.prefill(0, Int32Array.from([5, 6, 7, 9, 10, 11]), new Int32Array(0), undefined, 2);
    assert.throws(() => decoder.decodeGreedy(first.argmax, Int32Array.from([3, 3]), Int32Array.from([9, 4]), new Int32Array(0), 12, undefined, undefined, 'steps' as unknown as () => void), /onStep must be a function/);
    // End ids come as a list; the argmax passes over one of them under min_length, not several.
    assert.throws(() => decoder.decodeGreedy(first.argmax, Int32Array.from([3, 3]), Int32Array.from([9, 4]), -1 as unknown as Int32Array, 12), /endIds must be an Int32Array/);
    await assert.rejects(decoder.decodeGreedy(first.argmax, Int32Array.from([3, 3]), Int32Array.from([9, 4]), Int32Array.from([7, 8]), 12, undefined, Int32Array.from([2, 2])), /decodeGreedy bans one end id under min_length, not 2/);
    const seen: Array<[number, number[]]> = [];
    const run = await decoder.decodeGreedy(first.argmax, Int32Array.from([3, 3]), Int32Array.from([9, 4]), new Int32Array(0), 12, undefined, undefined, (step, ids) => seen.push([step, [...ids]]));
    // The run stops when its longest row is done; calls still queued come on later turns of the loop.
    assert.equal(run.steps, 9);
    await settled(() => seen.length >= run.steps);
    assert.deepEqual(
      seen,
      Array.from({ length: run.steps }, (_, k) => [k, [...run.tokens.subarray(2 * k, 2 * k + 2)]]),
    );
    // Row 0 alone from the same start gives the same tokens: the run's ids are each row's greedy path.
    await decoder.prefill(0, Int32Array.from([5, 6, 7]), new Int32Array(0));
    const alone = await decoder.decodeGreedy(first.argmax.subarray(0, 1), Int32Array.from([3]), Int32Array.from([9]), new Int32Array(0), 12);
    assert.deepEqual([...alone.tokens], seen.map(([, ids]) => ids[0]));
    await decoder.close();
  });

  test('hands each beam step\'s continuations and parents to onStep as the run goes, the same as the run returns', async () => {
    const decoder = new addon!.SlotDecoder(gpt2SlotDecoder(32).options);
    await decoder.load();
    // Two beams of one search from one prompt, the second out of the running until the first spreads.
    await decoder.prefill(0, Int32Array.from([5, 6, 7, 5, 6, 7]), new Int32Array(0), undefined, 2);
    const group: NativeBeamGroup = { firstRow: 0, width: 2, outputLength: 12, generated: 1, minLength: 0, endIds: new Int32Array(0), earlyStopping: 0, improvable: true, temperature: 1, lenPenalty: 1, diversityRate: 0, scores: Float64Array.from([-0.5, -1e9]), finished: new Float64Array(0) };
    const start: [Int32Array, Int32Array, NativeBeamGroup[], number] = [Int32Array.from([9, 9]), Int32Array.from([3, 3]), [group], 8];
    assert.throws(() => decoder.decodeBeams(...start, undefined, 'steps' as unknown as () => void), /onStep must be a function/);
    const seen: Array<{ step: number; tops: number[][]; parents: number[] }> = [];
    const run = await decoder.decodeBeams(...start, undefined, (step, sampled, parents) => {
      const tops = [0, 1].map((r) => [...sampled.topTokens.subarray(r * MAX_TOP_LOGPROBS, r * MAX_TOP_LOGPROBS + sampled.topCounts[r]!)]);
      seen.push({ step, tops, parents: [...parents] });
    });
    assert.equal(run.steps, 8);
    await settled(() => seen.length >= run.steps);
    const expected = Array.from({ length: run.steps }, (_, k) => ({
      step: k,
      tops: [0, 1].map((r) => [...run.topTokens.subarray((2 * k + r) * MAX_TOP_LOGPROBS, (2 * k + r) * MAX_TOP_LOGPROBS + run.topCounts[2 * k + r]!)]),
      parents: [...run.parents.subarray(2 * k, 2 * k + 2)],
    }));
    assert.deepEqual(seen, expected);
    // Each beam's continuations are 2 x width ids.
    assert.ok(seen.every(({ tops }) => tops.every((ids) => ids.length === 4)));
    await decoder.close();
  });
});

/** Beam searches only: the native engine steps them in runs inside the addon. */
const beamMix: Mix = [
  { prompt: [5, 6, 7], params: { beam_width: 4, request_output_len: 20 } },
  { prompt: [9, 10], params: { beam_width: 2, request_output_len: 14, len_penalty: 0.6, is_return_log_probs: true, num_return_sequences: 2 } },
  { prompt: [3, 4, 5, 6], params: { beam_width: 3, request_output_len: 18, early_stopping: true, min_length: 8, beam_search_diversity_rate: 0.5 } },
  { prompt: [11], params: { beam_width: 2, request_output_len: 16, early_stopping: 'never', temperature: 0.7, len_penalty: 1.5 } },
];

describe('NativeEngine (CPU)', { skip }, () => {
  const engines: Engine[] = [];
  before(() => {
    const hf = join(root, 'stories-hf');
    cpSync(`${STORIES}/hf`, hf, { recursive: true });
    const config = JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(hf, 'config.json'), JSON.stringify({ ...config, eos_token_id: 1 }));
    buildModel({ source: hf, out: dirs.stories, flavor: 'cuda', slotDecoder: true });
    for (const arch of ['gpt2', 'qwen2', 'llama'] as const) {
      makeCheckpoint({ arch, size: 'tiny', seed: 5, out: join(root, `${arch}-ckpt`) });
      buildModel({ source: join(root, `${arch}-ckpt`), out: dirs[arch], flavor: 'cuda', slotDecoder: true });
    }
  });
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const open = async (dir: string, native: boolean, maxBatchSize = 8, options: NativeEngineOptions = {}): Promise<Engine> => {
    const engine = native ? await NativeEngine.open(dir, { maxBatchSize, ...options }) : await OrtEngine.open(dir, { maxBatchSize, greedySearch: false });
    engines.push(engine);
    return engine;
  };

  const mix: Mix = [
    { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 24 } },
    { prompt: [12, 13], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 17 } },
    { prompt: [40, 41, 42, 43], params: { temperature: 0, repetition_penalty: 1.4, is_return_log_probs: true, request_output_len: 20 } },
    { prompt: [7, 8, 9], params: { temperature: 0.9, runtime_top_p: 0.8, random_seed: 9, presence_penalty: 0.5, request_output_len: 12 } },
    { prompt: [30, 31, 32, 33, 34], params: { beam_width: 3, request_output_len: 10 } },
    { prompt: [2], params: { temperature: 0, min_length: 5, request_output_len: 9, stop_words: [[17]] } },
    { prompt: [9, 8, 7], params: { temperature: 0.7, top_logprobs: 3, is_return_log_probs: true, random_seed: 2, request_output_len: 8 } },
  ];

  for (const name of ['gpt2', 'qwen2', 'llama'] as const) {
    test(`${name}: a mixed batch gives the TypeScript engine's tokens, log-probabilities and beams`, async () => {
      const native = await open(dirs[name], true);
      await assertMixAsReference(native, await open(dirs[name], false), mix);
      assert.ok(native.stats().decodeSteps > 0);
    });
  }

  test("through the addon's Linear (gelu_new and SiLU inside the projections), a mixed batch gives the TypeScript engine's tokens", async () => {
    for (const arch of ['gpt2', 'llama'] as const) {
      const dir = join(root, `${arch}-linear`);
      buildModel({ source: join(root, `${arch}-ckpt`), out: dir, flavor: 'cuda', slotDecoder: true, slotLinear: 'addon' });
      // Several tokens a row (the prefills) and one a row (the steps), up to 7 rows.
      await assertMixAsReference(await open(dir, true), await open(dirs[arch], false), mix);
    }
  });

  test('requests that join a running batch and outlive the ones before them get the tokens they get alone, seeded draws included', async () => {
    const engine = await open(dirs.qwen2, true, 4);
    // Greedy and sampled requests alternate; a seed must give the same draws whatever runs beside it.
    const alone = await staggeredAlone(engine);
    // Staggered: each arrives while earlier ones run; six requests share four slots.
    assert.deepEqual(await staggeredTogether(engine), alone);
    // And the TypeScript engine draws the same tokens.
    const reference = await open(dirs.qwen2, false, 4);
    assert.deepEqual(await Promise.all(STAGGERED_PROMPTS.map(async (p, i) => (await run(reference, p, staggeredParams(i))).map((e) => e.token))), alone);
  });

  test('requests admitted together with prompts of one length prefill as one batch and get the TypeScript engine\'s tokens', async () => {
    const native = await open(dirs.llama, true, 8);
    const prompt = (i: number): number[] => [3 + i, 9, 27 + 2 * i, 14];
    // Greedy, seeded draws, log-probabilities and top_logprobs share a prefill; the beam search between them runs its own.
    const together: Mix = [
      { prompt: prompt(0), params: { temperature: 0, request_output_len: 12 } },
      { prompt: prompt(1), params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 9 } },
      { prompt: prompt(2), params: { temperature: 0, is_return_log_probs: true, top_logprobs: 2, request_output_len: 7 } },
      { prompt: prompt(3), params: { beam_width: 2, request_output_len: 6 } },
      { prompt: prompt(4), params: { temperature: 0.9, runtime_top_p: 0.8, random_seed: 9, min_length: 5, request_output_len: 10 } },
      { prompt: prompt(5), params: { temperature: 0, repetition_penalty: 1.3, request_output_len: 11 } },
    ];
    await assertMixAsReference(native, await open(dirs.llama, false), together);
    // Four prefills (batches of powers of two): two and one before the beam search, the beam search, the two after it.
    assert.equal(native.stats().prefillSteps, 4);
  });

  test('batch-invariant: with every step padded to all its slots, a mixed batch still gives the TypeScript engine\'s tokens', async () => {
    // Staggered, so that steps run with every count of rows (each padded to 8).
    await assertMixAsReference(await open(dirs.qwen2, true, 8, { batchInvariant: true }), await open(dirs.qwen2, false), mix, 2);
  });

  for (const greedySteps of [8, undefined]) {
    test(`greedy batches run steps back to back in the addon (greedySteps ${greedySteps ?? 'default'}): staggered requests of mixed lengths get the TypeScript engine's tokens`, async () => {
      const native = await open(dirs.gpt2, true, 4, greedySteps === undefined ? {} : { greedySteps });
      const reference = await open(dirs.gpt2, false, 4);
      const prompts = [[3, 4, 5], [6], [7, 8, 9, 10, 11, 12], [13, 14], [15, 16, 17], [18, 19, 20, 21]];
      const lengths = [30, 5, 22, 9, 40, 3];
      const greedy = (i: number): SamplingParams => ({ temperature: 0, request_output_len: lengths[i]! });
      // Six requests in four slots: arrivals, departures and rows that stop cut runs short; the rest run on.
      const got = await Promise.all(prompts.map((p, i) => new Promise<void>((resolve) => setTimeout(resolve, i * 3)).then(() => run(native, p, greedy(i)))));
      const want = await Promise.all(prompts.map((p, i) => run(reference, p, greedy(i))));
      assert.deepEqual(got.map((events) => events.map((e) => [e.token, e.finishReason])), want.map((events) => events.map((e) => [e.token, e.finishReason])));
      const stats = native.stats();
      assert.ok(stats.steps < stats.decodeSteps, `${stats.steps} calls for ${stats.decodeSteps} decode steps`);
    });
  }

  test('batches of beam searches run steps back to back in the addon and give the TypeScript engine\'s beams', async () => {
    // Widths, length penalties, early stopping, min_length, diversity and temperature vary; requests
    // join and leave the runs.
    for (const name of ['qwen2', 'gpt2'] as const) {
      const native = await open(dirs[name], true, 16);
      await assertMixAsReference(native, await open(dirs[name], false, 16), beamMix, 2);
      const stats = native.stats();
      assert.ok(stats.steps < stats.decodeSteps, `${name}: ${stats.steps} calls for ${stats.decodeSteps} decode steps`);
    }
    // stories260K's beams reach its end id: hypotheses finish inside the runs and end the searches.
    const params: SamplingParams[] = [
      { beam_width: 3, request_output_len: 300, is_return_log_probs: true, num_return_sequences: 3 },
      { beam_width: 4, request_output_len: 300, len_penalty: 0.5, early_stopping: true },
      { beam_width: 2, request_output_len: 300, len_penalty: 2, early_stopping: 'never', min_length: 20 },
    ];
    const stories: Mix = params.map((p) => ({ prompt: [1], params: p }));
    const native = await open(dirs.stories, true);
    await assertMixAsReference(native, await open(dirs.stories, false), stories);
    const stats = native.stats();
    assert.ok(stats.steps * 4 < stats.decodeSteps, `${stats.steps} calls for ${stats.decodeSteps} decode steps`);
  });

  test('stories260K: greedy from BOS stops at the end id as the TypeScript engine does', async () => {
    const native = await open(dirs.stories, true);
    const reference = await open(dirs.stories, false);
    const params = { temperature: 0, request_output_len: 400 };
    const got = await run(native, [1], params);
    // Its steps are counted by the time its last token arrives: one a token after the prompt's.
    assert.equal(native.stats().decodeSteps, got.length - 1);
    assert.deepEqual(got, await run(reference, [1], params));
    assert.equal(got.at(-1)!.finishReason, 'end_id');
    assert.ok(got.length < 400);
    // With a min_length past that end, the greedy run's argmax passes over the end id until then.
    const longer = { ...params, min_length: got.length + 20 };
    const held = await run(native, [1], longer);
    assert.deepEqual(held, await run(reference, [1], longer));
    assert.ok(held.length >= got.length + 20 && held.slice(0, got.length + 19).every((e) => e.token !== 1));
    assert.ok(native.stats().steps < native.stats().decodeSteps);
  });

  test('a failure while a greedy or beam run\'s step is taken fails the batch\'s requests, and the engine goes on', async () => {
    const engine = await open(dirs.gpt2, true, 4);
    const greedyParams: SamplingParams = { temperature: 0, request_output_len: 30 };
    const beamParams: SamplingParams = { beam_width: 2, request_output_len: 20 };
    const want = await Promise.all([run(engine, [3, 4, 5], greedyParams), run(engine, [6, 7], beamParams)]);
    // The tenth call inside each kind of run throws: a row's token taken, a search's step replayed.
    for (const [proto, method, params] of [
      [Sequence.prototype as unknown as Record<string, unknown>, 'accept', greedyParams],
      [BeamSequence.prototype as unknown as Record<string, unknown>, 'stepContinuations', beamParams],
    ] as const) {
      const original = proto[method] as (...args: unknown[]) => unknown;
      let calls = 0;
      proto[method] = function (this: unknown, ...args: unknown[]) {
        if (++calls === 10) throw new Error(`${method} failed`);
        return original.apply(this, args);
      };
      try {
        await assert.rejects(Promise.all([run(engine, [3, 4, 5], params), run(engine, [6, 7], params)]), new RegExp(`${method} failed`));
      } finally {
        proto[method] = original;
      }
      assert.ok(calls >= 10, `${method}: ${calls} calls`);
    }
    assert.deepEqual(await Promise.all([run(engine, [3, 4, 5], greedyParams), run(engine, [6, 7], beamParams)]), want);
    await settled(() => engine.stats().cacheTokens === 0);
  });

  test('a cancelled stream leaves its slot and the others go on unchanged', async () => {
    const engine = await open(dirs.gpt2, true, 2);
    await cancelledStreamLeavesItsSlot(engine, 60);
    await settled(() => engine.stats().cacheTokens === 0);
    assert.equal(engine.stats().cacheTokens, 0);
  });

  test('refuses what does not fit a slot, and a directory without the slot decoder, saying why', async () => {
    const engine = await open(dirs.gpt2, true);
    await assert.rejects(run(engine, [3, 4], { temperature: 0, request_output_len: 300 }), /request_output_len|300/);
    const plain = join(root, 'gpt2-plain');
    buildModel({ source: join(root, 'gpt2-ckpt'), out: plain });
    assert.match(nativeUnavailable(plain)!, /no slot decoder/);
    await assert.rejects(NativeEngine.open(plain), (error: Error & { code?: string }) => error.code === 'CHORUS_UNSUPPORTED' && /--slot-decoder/.test(error.message));
    await assert.rejects(NativeEngine.open(dirs.gpt2, { slotLength: 1 }), (error: Error & { param?: string }) => error.param === 'slotLength');
  });
});

describe('NativeEngine, encoder-decoders (CPU)', { skip }, () => {
  const archs = ['t5', 't5v1_1', 'bart'] as const;
  const dirOf = (arch: string): string => join(root, `${arch}-s2s`);
  const engines: Engine[] = [];
  before(() => {
    for (const arch of archs) {
      makeCheckpoint({ arch, size: 'tiny', seed: 6, out: join(root, `${arch}-s2s-ckpt`) });
      buildModel({ source: join(root, `${arch}-s2s-ckpt`), out: dirOf(arch), slotDecoder: true });
    }
  });
  after(async () => {
    await Promise.all(engines.map((e) => e.close()));
  });
  const open = async (arch: string, native: boolean, maxBatchSize = 8, options: NativeEngineOptions = {}): Promise<Engine> => {
    const engine = native ? await NativeEngine.open(dirOf(arch), { maxBatchSize, slotLength: 48, sourceLength: 24, ...options }) : await Seq2SeqEngine.open(dirOf(arch), { maxBatchSize });
    engines.push(engine);
    return engine;
  };
  const mix: Mix = [
    { prompt: [5, 6, 7, 8, 9, 10, 11], params: { temperature: 0, request_output_len: 24 } },
    { prompt: [12, 13], params: { temperature: 0.8, runtime_top_k: 20, random_seed: 4, request_output_len: 17 } },
    { prompt: [40, 41, 42, 43], params: { temperature: 0, repetition_penalty: 1.4, is_return_log_probs: true, request_output_len: 20 } },
    { prompt: [30, 31, 32, 33, 34], params: { beam_width: 3, request_output_len: 10 } },
    { prompt: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25], params: { temperature: 0, min_length: 5, request_output_len: 9 } },
    { prompt: [9, 8, 7], params: { temperature: 0.7, top_logprobs: 3, is_return_log_probs: true, random_seed: 2, request_output_len: 8 } },
  ];

  for (const arch of archs) {
    test(`${arch}: a mixed batch gives the TypeScript engine's tokens, log-probabilities and beams`, async () => {
      await assertMixAsReference(await open(arch, true), await open(arch, false), mix);
    });
  }

  test("through the addon's Linear (ReLU, gated gelu_new and GELU inside the projections), a mixed batch gives the TypeScript engine's tokens", async () => {
    for (const arch of archs) {
      const dir = join(root, `${arch}-s2s-linear`);
      buildModel({ source: join(root, `${arch}-s2s-ckpt`), out: dir, slotDecoder: true, slotLinear: 'addon' });
      const native = await NativeEngine.open(dir, { maxBatchSize: 8, slotLength: 48, sourceLength: 24 });
      engines.push(native);
      await assertMixAsReference(native, await open(arch, false), mix);
    }
  });

  test("BART's slot encoder through ONNX Runtime's MultiHeadAttention (sources of mixed lengths, padding as each row's length) gives the TypeScript engine's tokens", async () => {
    const dir = join(root, 'bart-s2s-mha');
    buildModel({ source: join(root, 'bart-s2s-ckpt'), out: dir, slotDecoder: true, slotLinear: 'addon', encoderAttention: 'MultiHeadAttention' });
    const encoder = onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', 'encoder_model_slots.onnx'))).graph!.node!;
    const attention = encoder.filter((n) => n.opType === 'MultiHeadAttention');
    assert.equal(attention.length, 2, 'a MultiHeadAttention per encoder layer');
    assert.deepEqual(attention[0]!.input!.slice(3, 4), [''], 'no bias input: q, k and v come with their biases from their projections');
    assert.equal(attention[0]!.input!.length, 5, 'q, k, v, no bias and the padding');
    assert.equal(encoder.filter((n) => n.opType === 'Split').length, 0);
    assert.equal(encoder.filter((n) => n.opType === 'Softmax').length, 0);
    const native = await NativeEngine.open(dir, { maxBatchSize: 8, slotLength: 48, sourceLength: 24 });
    engines.push(native);
    await assertMixAsReference(native, await open('bart', false), mix);
  });

  test('requests that join a running batch, beams among them, get the tokens they get alone', async () => {
    // Three slots for six requests: rows leave, the ones behind move down with their sources, and a
    // beam search spreads over slots that held other requests' sources.
    const engine = await open('t5', true, 3);
    const prompts = [[3, 4, 5], [6], [7, 8, 9, 10, 11, 12], [13, 14], [15, 16, 17], [18, 19, 20, 21]];
    const lengths = [30, 5, 22, 9, 40, 3];
    const paramsOf = (i: number): SamplingParams =>
      i === 3 ? { beam_width: 2, request_output_len: lengths[i]! } : i % 2 === 0 ? { temperature: 0, request_output_len: lengths[i]! } : { temperature: 0.9, runtime_top_p: 0.9, random_seed: 100 + i, request_output_len: lengths[i]! };
    const alone: number[][] = [];
    for (const [i, p] of prompts.entries()) alone.push((await run(engine, p, paramsOf(i))).map((e) => e.token));
    const together = await Promise.all(prompts.map((p, i) => new Promise<void>((resolve) => setTimeout(resolve, i * 3)).then(() => run(engine, p, paramsOf(i)))));
    assert.deepEqual(together.map((events) => events.map((e) => e.token)), alone);
  });

  test('batches of beam searches run steps back to back in the addon and give the TypeScript engine\'s beams', async () => {
    for (const arch of ['t5', 'bart'] as const) {
      const native = await open(arch, true, 16);
      await assertMixAsReference(native, await open(arch, false, 16), beamMix, 2);
      const stats = native.stats();
      assert.ok(stats.steps < stats.decodeSteps, `${arch}: ${stats.steps} calls for ${stats.decodeSteps} decode steps`);
    }
  });

  test('a cancelled stream leaves its slot and the others go on unchanged', async () => {
    await cancelledStreamLeavesItsSlot(await open('bart', true, 2), 30);
  });

  test('batch-invariant: each source encoded alone and every step padded to all its slots, a mixed batch gives the TypeScript engine\'s tokens', async () => {
    await assertMixAsReference(await open('bart', true, 8, { batchInvariant: true }), await open('bart', false), mix);
  });

  test("T5's position bias past its max distance (one bucket from there on) as the TypeScript engine has it", async () => {
    // relative_attention_max_distance 20: outputs of 40 tokens attend over distances up to 40.
    const checkpoint = join(root, 't5-near-ckpt');
    makeCheckpoint({ arch: 't5', size: 'tiny', seed: 8, out: checkpoint });
    const config = JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(checkpoint, 'config.json'), JSON.stringify({ ...config, relative_attention_max_distance: 20 }));
    const dir = join(root, 't5-near');
    buildModel({ source: checkpoint, out: dir, slotDecoder: true });
    const native = await NativeEngine.open(dir, { maxBatchSize: 4, slotLength: 48, sourceLength: 24 });
    const reference = await Seq2SeqEngine.open(dir, { maxBatchSize: 4 });
    engines.push(native, reference);
    const params: SamplingParams = { temperature: 0, min_length: 40, request_output_len: 40, is_return_log_probs: true };
    for (const source of [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16]]) {
      const got = await run(native, source, params);
      const want = await run(reference, source, params);
      assert.equal(got.length, 40);
      assert.deepEqual(got.map((e) => e.token), want.map((e) => e.token));
      got.forEach((e, i) => assert.ok(Math.abs(e.logProb! - want[i]!.logProb!) < 1e-4, `log-probability ${i}`));
    }
  });

  test('refuses a source or an output that does not fit its slots, naming the field', async () => {
    const engine = await open('t5', true);
    await assert.rejects(run(engine, Array.from({ length: 25 }, (_, i) => i + 3), { temperature: 0, request_output_len: 4 }), (error: Error & { param?: string }) => error.param === 'inputIds' && /1 to 24/.test(error.message));
    await assert.rejects(run(engine, [3, 4], { temperature: 0, request_output_len: 48 }), (error: Error & { param?: string }) => error.param === 'request_output_len');
    await assert.rejects(NativeEngine.open(dirOf('t5'), { sourceLength: 0 }), (error: Error & { param?: string }) => error.param === 'sourceLength');
  });
});
