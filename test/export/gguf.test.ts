import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { ensurePeer, openPeer, peerGreedy, type PeerLlama } from '../../bench/peer/peer.ts';
import type { ChorusError } from '../../src/errors.ts';
import { exportGguf, readGgufHeader, type GgufHeader } from '../../src/export/gguf/index.ts';
import { OrtEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type CheckpointArch } from '../../src/modelbuild/index.ts';
import { fromHalfBits } from '../../src/util/half.ts';
import { ROOT, STORIES, TOKENIZERS } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-gguf-');
const storiesBin = `${STORIES}/stories260K.bin`;

/** The bytes of tensor `name` of a GGUF file. */
function tensorBytes(file: string, header: GgufHeader, name: string, length: number): Buffer {
  const info = header.tensors.find((t) => t.name === name);
  assert.ok(info, `no tensor ${name}`);
  const out = Buffer.alloc(length);
  const fd = openSync(file, 'r');
  readSync(fd, out, 0, length, info.offset);
  closeSync(fd);
  return out;
}

/**
 * A byte-level BPE tokenizer.json of `size` tokens: GPT-2's 256 byte symbols, then merges of letter
 * pairs, then `<|endoftext|>` as the last id.
 */
function writeTinyBpe(dir: string, size: number): void {
  const printable = [...Array(256).keys()].filter((b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255));
  let extra = 0;
  const symbol = (b: number): string => String.fromCodePoint(printable.includes(b) ? b : 256 + extra++);
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[symbol(b)] = b;
  const merges: string[] = [];
  const letters = 'etaoinshrdlucmfw';
  for (const a of letters) for (const c of letters) if (256 + merges.length < size - 1) {
    merges.push(`${a} ${c}`);
    vocab[a + c] = 256 + merges.length - 1;
  }
  const json = { model: { type: 'BPE', vocab, merges }, added_tokens: [{ id: size - 1, content: '<|endoftext|>', special: true }] };
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
}

describe('GGUF export', () => {
  test('stories260K: llama metadata, the llama2.c vocabulary, and q/k rows as llama2.c stored them', () => {
    const out = join(root, 'stories-f32.gguf');
    const result = exportGguf({ source: storiesBin, out, type: 'f32' });
    assert.equal(result.arch, 'llama');
    const header = readGgufHeader(out);
    const meta = header.metadata;
    assert.equal(header.version, 3);
    assert.equal(meta.get('general.architecture'), 'llama');
    assert.equal(meta.get('llama.embedding_length'), 64);
    assert.equal(meta.get('llama.block_count'), 5);
    assert.equal(meta.get('llama.attention.head_count_kv'), 4);
    assert.equal(meta.get('llama.rope.dimension_count'), 8);
    assert.equal(meta.get('llama.context_length'), 512);
    const tokens = meta.get('tokenizer.ggml.tokens') as string[];
    assert.deepEqual(tokens.slice(0, 4), ['<unk>', '<s>', '</s>', '<0x00>']);
    assert.ok(tokens.includes('\u2581the'));
    assert.deepEqual((meta.get('tokenizer.ggml.token_type') as number[]).slice(0, 4), [2, 3, 3, 6]);
    assert.equal(header.tensors.length, 2 + 5 * 9); // embedding, final norm, 9 per layer; the head is tied
    for (const t of header.tensors) assert.equal(t.offset % 32, 0, t.name);
    // llama.cpp rotates adjacent pairs, as llama2.c does: layer 0's wq comes out byte for byte as stored.
    const source = readFileSync(storiesBin);
    const wqStart = 28 + (512 * 64 + 5 * 64) * 4;
    assert.ok(tensorBytes(out, header, 'blk.0.attn_q.weight', 64 * 64 * 4).equals(source.subarray(wqStart, wqStart + 64 * 64 * 4)));
  });

  test('f16 and q8_0: matrices encoded, vectors kept f32, rows that are not whole Q8_0 blocks in f16', () => {
    const f32 = readGgufHeader(join(root, 'stories-f32.gguf'));
    for (const type of ['f16', 'q8_0'] as const) {
      const out = join(root, `stories-${type}.gguf`);
      exportGguf({ source: storiesBin, out, type });
      const header = readGgufHeader(out);
      const typeOf = (name: string): number => header.tensors.find((t) => t.name === name)!.type;
      assert.equal(typeOf('blk.0.attn_norm.weight'), 0);
      assert.equal(typeOf('blk.0.attn_q.weight'), type === 'f16' ? 1 : 8);
      assert.equal(typeOf('blk.0.ffn_down.weight'), 1); // 172 columns: not whole Q8_0 blocks
      const want = new Float32Array(tensorBytes(join(root, 'stories-f32.gguf'), f32, 'blk.0.attn_q.weight', 64 * 64 * 4).buffer.slice(0));
      if (type === 'f16') {
        const bytes = tensorBytes(out, header, 'blk.0.attn_q.weight', 64 * 64 * 2);
        for (let i = 0; i < want.length; i++) assert.ok(Math.abs(fromHalfBits(bytes.readUInt16LE(i * 2)) - want[i]!) <= Math.abs(want[i]!) * 1e-3 + 1e-7);
      } else {
        const bytes = tensorBytes(out, header, 'blk.0.attn_q.weight', (64 * 64 / 32) * 34);
        for (let i = 0; i < want.length; i++) {
          const block = Math.floor(i / 32) * 34;
          const d = fromHalfBits(bytes.readUInt16LE(block));
          assert.ok(Math.abs(d * bytes.readInt8(block + 2 + (i % 32)) - want[i]!) <= d * 0.57, `value ${i}`);
        }
      }
    }
  });

  test('gpt2: fused q/k/v transposed to [out, in], position embeddings, gpt2 BPE vocabulary with merges', () => {
    const ckpt = join(root, 'gpt2-layout');
    makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 3, out: ckpt });
    writeTinyBpe(ckpt, 512);
    const out = join(root, 'gpt2.gguf');
    exportGguf({ source: ckpt, out, type: 'f32' });
    const header = readGgufHeader(out);
    assert.equal(header.metadata.get('tokenizer.ggml.model'), 'gpt2');
    assert.equal(header.metadata.get('tokenizer.ggml.pre'), 'gpt-2');
    assert.equal((header.metadata.get('tokenizer.ggml.merges') as string[])[0], 'e e');
    const qkv = header.tensors.find((t) => t.name === 'blk.0.attn_qkv.weight')!;
    assert.deepEqual(qkv.dims, [192, 64]);
    assert.deepEqual(header.tensors.find((t) => t.name === 'position_embd.weight')!.dims, [128, 64]);
  });

  test('refusals: an encoder-decoder, a tokenizer larger than the model\'s vocabulary, no tokenizer; no file is left behind', () => {
    const t5 = join(root, 't5');
    makeCheckpoint({ arch: 't5', size: 'tiny', seed: 1, out: t5 });
    writeTinyBpe(t5, 512);
    assert.throws(() => exportGguf({ source: t5, out: join(root, 'x.gguf') }), (e: ChorusError) => e.code === 'CHORUS_UNSUPPORTED' && /encoder-decoder/.test(e.message));
    const llama = join(root, 'llama-big-vocab');
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 1, out: llama });
    assert.throws(() => exportGguf({ source: llama, out: join(root, 'x.gguf') }), (e: ChorusError) => e.code === 'CHORUS_FILE_MISSING' && /give --tokenizer/.test(e.message));
    writeTinyBpe(llama, 600);
    assert.throws(() => exportGguf({ source: llama, out: join(root, 'x.gguf') }), (e: ChorusError) => e.code === 'CHORUS_FILE_INVALID' && /600 tokens, more than the model's vocabulary of 512/.test(e.message));
    // GPT-2's own tokenizer.json (whose BPE model names no type) is read, and is too large for this model.
    assert.throws(() => exportGguf({ source: llama, out: join(root, 'x.gguf'), tokenizer: `${TOKENIZERS}/gpt2/tokenizer.json` }), /50257 tokens, more than the model's vocabulary of 512/);
    assert.equal(existsSync(join(root, 'x.gguf')), false);
  });

  test('chorus export gguf on the command line', () => {
    const out = join(root, 'cli.gguf');
    const cli = spawnSync(process.execPath, [join(ROOT, 'bin/chorus.js'), 'export', 'gguf', storiesBin, '--out', out, '--type', 'q8_0'], { encoding: 'utf8', cwd: ROOT });
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, /^wrote .*cli\.gguf: llama, 47 tensors, q8_0, 0\.3 MiB, vocabulary of 512 from .*tok512\.bin\n$/);
    assert.equal(readGgufHeader(out).metadata.get('general.file_type'), 7);
  });
});

describe('node-llama-cpp runs what Chorus exports', () => {
  let llama: PeerLlama | undefined;
  let skip: string | undefined;
  before(async () => {
    const peer = await ensurePeer();
    if (peer.ok) llama = await openPeer('cpu');
    else skip = peer.reason;
  });
  after(() => llama?.dispose());

  /** Greedy ids from node-llama-cpp (one thread: llama.cpp's spinning threads starve on a loaded machine). */
  async function peerIds(gguf: string, prompt: number[], steps: number): Promise<number[]> {
    const model = await llama!.loadModel({ modelPath: gguf, gpuLayers: 0 });
    const context = await model.createContext({ contextSize: 256, sequences: 1, threads: 1 });
    try {
      return await peerGreedy(context.getSequence(), prompt, steps);
    } finally {
      await context.dispose();
      await model.dispose();
    }
  }

  async function chorusIds(modelDir: string, prompt: number[], steps: number): Promise<number[]> {
    const engine = await OrtEngine.open(modelDir);
    try {
      const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: steps } }).pipe(toArray()));
      return events.map((e) => e.token);
    } finally {
      await engine.close();
    }
  }

  test('stories260K (f32): greedy from BOS gives Chorus\'s 60 ids, llama2.c\'s story', async (t) => {
    if (skip) return t.skip(skip);
    const gguf = join(root, 'stories-interop.gguf');
    exportGguf({ source: storiesBin, out: gguf, type: 'f32' });
    buildModel({ source: storiesBin, out: join(root, 'stories-onnx') });
    const chorus = await chorusIds(join(root, 'stories-onnx'), [1], 60);
    assert.equal(chorus.length, 60);
    assert.deepEqual(await peerIds(gguf, [1], 60), chorus);
  });

  for (const arch of ['llama', 'qwen2', 'gpt2'] as const satisfies readonly CheckpointArch[]) {
    test(`tiny ${arch} (f32): 32 greedy steps give Chorus's ids`, async (t) => {
      if (skip) return t.skip(skip);
      const ckpt = join(root, `${arch}-interop`);
      makeCheckpoint({ arch, size: 'tiny', seed: 7, out: ckpt });
      writeTinyBpe(ckpt, 512);
      const gguf = join(root, `${arch}-interop.gguf`);
      exportGguf({ source: ckpt, out: gguf, type: 'f32' });
      buildModel({ source: ckpt, out: `${ckpt}-onnx` });
      const prompt = [5, 17, 99, 200, 3, 42, 7, 300];
      const chorus = await chorusIds(`${ckpt}-onnx`, prompt, 32);
      assert.equal(chorus.length, 32);
      assert.deepEqual(await peerIds(gguf, prompt, 32), chorus);
    });
  }
});
