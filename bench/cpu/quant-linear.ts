/**
 * Quantized projections on the CPU, one row (a decode step): the addon's QuantLinear (its host path)
 * against ONNX Runtime's MatMulNBits and float32 MatMul / the addon's Linear, 8 bits in blocks of up to 256 (one scale a channel, as `--weights int8`) and 4 bits in blocks
 * of 32, at the projection shapes of stories260K and Qwen2-0.5B. Each timing is the mean of runs of a
 * graph of `copies` projections (weights of their own, 64 MB or more in all for the large shapes),
 * per projection; one intra-op thread, and ONNX Runtime's default. "a8": accuracy_level 4 (int8
 * activations). Prints a table and writes bench/results/cpu-quant-linear-<date>.json.
 *   npx tsx bench/cpu/quant-linear.ts      BENCH_SHAPES=gpt2,qwen2 (name prefixes; default all),
 *   BENCH_VARIANTS='int8 QuantLinear a8,int4 MatMulNBits' (fp32 MatMul always; default all)
 */
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import { int8BlockSize } from '../../src/modelbuild/quant/nbits.ts';
import { loadNative } from '../../src/native/index.ts';

const { onnx } = onnxProto;
const T = onnx.TensorProto.DataType;
const BLOCK = 32;
const { addon, reason } = loadNative();
if (addon === undefined) throw new Error(`the native addon is needed: ${reason}`);
const work = mkdtempSync(join(tmpdir(), 'cpu-quant-linear-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

const SHAPES = [
  { name: 'stories260K up', K: 64, N: 172 },
  { name: 'stories260K down', K: 172, N: 64 },
  { name: 'qwen2-0.5b qkvo', K: 896, N: 896 },
  { name: 'qwen2-0.5b up', K: 896, N: 4864 },
  { name: 'qwen2-0.5b down', K: 4864, N: 896 },
  { name: 'gpt2 qkv', K: 768, N: 2304 },
  { name: 'gpt2 up', K: 768, N: 3072 },
  { name: 'gpt2 down', K: 3072, N: 768 },
  { name: 'gpt2 head', K: 768, N: 50257 },
].filter((s) => process.env.BENCH_SHAPES === undefined || process.env.BENCH_SHAPES.split(',').some((p) => s.name.startsWith(p)));
const VARIANTS = [
  { name: 'fp32 MatMul', op: 'MatMul', bits: 0, accuracy: 0 },
  { name: 'fp32 Linear', op: 'Linear', bits: 0, accuracy: 0 },
  { name: 'int8 MatMulNBits', op: 'MatMulNBits', bits: 8, accuracy: 0 },
  { name: 'int8 MatMulNBits a8', op: 'MatMulNBits', bits: 8, accuracy: 4 },
  { name: 'int8 QuantLinear', op: 'QuantLinear', bits: 8, accuracy: 0 },
  { name: 'int8 QuantLinear a8', op: 'QuantLinear', bits: 8, accuracy: 4 },
  { name: 'int4 MatMulNBits', op: 'MatMulNBits', bits: 4, accuracy: 0 },
  { name: 'int4 QuantLinear', op: 'QuantLinear', bits: 4, accuracy: 0 },
] as const;
const variants = VARIANTS.filter((v) => process.env.BENCH_VARIANTS === undefined || v.name === 'fp32 MatMul' || process.env.BENCH_VARIANTS.split(',').includes(v.name));

function floats(n: number, scale: number): Uint8Array {
  const values = Float32Array.from({ length: n }, () => (Math.random() - 0.5) * scale);
  return new Uint8Array(values.buffer);
}

function model(v: (typeof VARIANTS)[number], K: number, N: number, copies: number): string {
  const initializer: onnxProto.onnx.ITensorProto[] = [];
  const node: onnxProto.onnx.INodeProto[] = [];
  const output: onnxProto.onnx.IValueInfoProto[] = [];
  const int = (name: string, i: number): onnxProto.onnx.IAttributeProto => ({ name, type: onnx.AttributeProto.AttributeType.INT, i });
  // int8 as `chorus build --weights int8` writes it: one scale per channel, in blocks of up to 256.
  const block = v.bits === 8 ? int8BlockSize(K) : BLOCK;
  const blocks = Math.ceil(K / block);
  const weights = v.bits === 0 ? floats(K * N, 0.1) : randomFillSync(new Uint8Array(N * blocks * ((block * v.bits) / 8)));
  const scales = floats(N * blocks, 0.01);
  for (let c = 0; c < copies; c++) {
    if (v.bits === 0) {
      initializer.push({ name: `w${c}`, dims: v.op === 'MatMul' ? [K, N] : [N, K], dataType: T.FLOAT, rawData: weights });
      node.push({ opType: v.op, input: ['x', `w${c}`], output: [`y${c}`], ...(v.op === 'Linear' ? { domain: 'chorus' } : {}) });
    } else {
      initializer.push({ name: `b${c}`, dims: [N, blocks, (block * v.bits) / 8], dataType: T.UINT8, rawData: weights });
      initializer.push({ name: `s${c}`, dims: [N, blocks], dataType: T.FLOAT, rawData: scales });
      const attribute = [int('K', K), int('N', N), int('bits', v.bits), int('block_size', block), ...(v.accuracy === 0 ? [] : [int('accuracy_level', v.accuracy)])];
      node.push({ opType: v.op, domain: v.op === 'QuantLinear' ? 'chorus' : 'com.microsoft', input: ['x', `b${c}`, `s${c}`], output: [`y${c}`], attribute });
    }
    output.push({ name: `y${c}`, type: { tensorType: { elemType: T.FLOAT, shape: { dim: [{ dimValue: 1 }, { dimValue: N }] } } } });
  }
  const input = [{ name: 'x', type: { tensorType: { elemType: T.FLOAT, shape: { dim: [{ dimValue: 1 }, { dimValue: K }] } } } }];
  const proto = onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
      { domain: 'chorus', version: 1 },
    ],
    graph: { name: 'projections', node, initializer, input, output },
  });
  const path = join(work, 'model.onnx');
  writeFileSync(path, onnx.ModelProto.encode(proto).finish());
  return path;
}

const rows: Array<{ shape: string; variant: string; threads: string; us: number; speedupOverFp32?: number }> = [];
console.log(`${'shape'.padEnd(18)} ${'variant'.padEnd(17)} ${'threads'.padStart(7)} ${'us'.padStart(9)} ${'x fp32'.padStart(7)}`);
for (const { name, K, N } of SHAPES) {
  for (const v of variants) {
    const copies = Math.max(4, Math.min(64, Math.ceil((64 << 20) / (K * N * 4))));
    const path = model(v, K, N, copies);
    for (const threads of [1, 0]) {
      const x = { name: 'x', type: 'float32' as const, dims: [1, K], data: floats(K, 2) };
      const { ms } = addon.runGraph({ model: path, provider: 'cpu', dtype: 'fp32', iterations: 20, ...(threads === 0 ? {} : { intraOpThreads: threads }) }, [x]);
      const us = (ms * 1000) / copies;
      const fp32 = rows.find((r) => r.shape === name && r.variant === 'fp32 MatMul' && r.threads === String(threads || 'default'));
      const row = { shape: name, variant: v.name, threads: String(threads || 'default'), us, ...(fp32 === undefined ? {} : { speedupOverFp32: fp32.us / us }) };
      rows.push(row);
      console.log(`${name.padEnd(18)} ${v.name.padEnd(17)} ${row.threads.padStart(7)} ${us.toFixed(1).padStart(9)} ${(row.speedupOverFp32?.toFixed(2) ?? '-').padStart(7)}`);
    }
  }
}
const out = join(import.meta.dirname, '..', 'results', `cpu-quant-linear-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), block: BLOCK, rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
