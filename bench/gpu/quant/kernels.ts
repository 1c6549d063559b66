/**
 * Quantized projections on one GPU: the addon's QuantLinear against ONNX Runtime's MatMulNBits (CUDA
 * provider), with fp16 MatMul and the addon's Linear beside them, at M = 1, 8, 16, 64 and 128 rows for the
 * projection shapes of TinyLlama and Llama-2-7B, 4 and 8 bits (blocks of 128, no zero points);
 * QuantLinear's decode kernels side by side: its default (the wide kernel up to 4 rows), "QL mma" the
 * tensor-core GEMV and "QL plain" the float32 one (CHORUS_QUANT_GEMV=mma, plain), "int8 QL floats" the
 * 8-bit wide kernel in float32 arithmetic rather than float16 pairs (CHORUS_QUANT_BYTE_PAIRS=0; at the
 * rows of QUANT_ROWS up to 4), "QL t256", "QL t128", "QL t64" the float16 kernels at one row with a
 * thread a chunk and at most that many threads a block (CHORUS_QUANT_PAIR_THREADS), "int8 QL chan ..."
 * QuantLinear as a built decoder has it (blocks of 256, a pre-norm folded in, gated); past 8 rows "QL
 * wmma" the tiles of weights dequantized in shared memory (CHORUS_QUANT_TILES=wmma) and the register
 * tiles at 8 warps a block (CHORUS_QUANT_TILE_WARPS=8; default 4). Each
 * timing is a CUDA graph of `copies` projections (weights of their own, 128 MB or more in all, so
 * they come from memory and not L2) replayed `QUANT_ITERATIONS` times; a projection's time is the
 * replay's over the copies. Effective bandwidth: its weights, scales, x and y over that time, and
 * that as a share of the H100's 3.35 TB/s. QuantLinear's outputs are compared with MatMulNBits' on
 * the same weights, and first every CUDA path of QuantLinear with its CPU path on small shapes.
 * Prints tables and writes $OUT/quant-kernels.json (also after a case fails or the budget runs out).
 *   source /root/gpu-env/env.sh && npm run build:native && OUT=/tmp/quant bash bench/gpu/quant/kernels.sh
 * Knobs: QUANT_BUDGET_S (default 160: cases not started by then are left out), QUANT_ITERATIONS (50),
 * QUANT_PARITY=0 (no parity pass), QUANT_SHAPES, QUANT_VARIANTS (names, comma-separated), QUANT_ROWS
 * (default 1,8,16,64,128).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadNative } from '../../../src/native/index.ts';
import { activations, makeWeights, modelBytes, trafficBytes, type Variant, type Weights } from './models.ts';
import { parity, type ParityCase } from './parity.ts';

const PEAK_GBS = 3350;
const started = Date.now();
const deadline = started + Number(process.env.QUANT_BUDGET_S ?? 160) * 1000;
const iterations = Number(process.env.QUANT_ITERATIONS ?? 50);
const out = process.env.OUT ?? 'bench/results';
mkdirSync(out, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'quant-kernels-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

const { addon, reason } = loadNative();
if (addon === undefined || !addon.cuda) throw new Error(`the native addon with CUDA is needed: ${addon === undefined ? reason : 'built without CUDA'}`);

// The issue's targets first: a budget that runs out leaves out the last.
const SHAPES = [
  { name: 'llama2-7b qkvo', K: 4096, N: 4096 },
  { name: 'llama2-7b qkv', K: 4096, N: 12288 },
  { name: 'tinyllama qkvo', K: 2048, N: 2048 },
  { name: 'llama2-7b gate/up', K: 4096, N: 11008 },
  { name: 'llama2-7b gate+up', K: 4096, N: 22016 },
  { name: 'tinyllama gate/up', K: 2048, N: 5632 },
  { name: 'llama2-7b down', K: 11008, N: 4096 },
].filter((s) => process.env.QUANT_SHAPES === undefined || process.env.QUANT_SHAPES.split(',').includes(s.name));
const ALL_VARIANTS: Variant[] = [
  { name: 'fp16 MatMul', op: 'MatMul' },
  { name: 'fp16 Linear', op: 'Linear' },
  { name: 'int8 MatMulNBits', op: 'MatMulNBits', bits: 8 },
  { name: 'int8 QuantLinear', op: 'QuantLinear', bits: 8 },
  { name: 'int4 MatMulNBits', op: 'MatMulNBits', bits: 4 },
  { name: 'int4 QuantLinear', op: 'QuantLinear', bits: 4 },
  { name: 'int8 QL mma', op: 'QuantLinear', bits: 8, gemv: 'mma' },
  { name: 'int8 QL wide', op: 'QuantLinear', bits: 8, gemv: 'wide' },
  // Up to 4 rows: 8-bit weights in the wide kernel's float32 arithmetic rather than float16 pairs.
  { name: 'int8 QL floats', op: 'QuantLinear', bits: 8, env: { CHORUS_QUANT_BYTE_PAIRS: '0' }, rows: [1, 2, 3, 4] },
  { name: 'int4 QL mma', op: 'QuantLinear', bits: 4, gemv: 'mma' },
  // As a built decoder's QuantLinears are: blocks of 256 (`--weights int8`: a row's one scale repeated),
  // a pre-norm folded in, gated (silu: the shape's N rows are the gates' and the up rows'), at one row,
  // by default and at a thread a chunk.
  ...(['', '256', '128'] as const).flatMap((most) =>
    [false, true].map((gated) => ({
      name: `int8 QL chan norm${gated ? ' gated' : ''}${most === '' ? '' : ` t${most}`}`,
      op: 'QuantLinear' as const,
      bits: 8 as const,
      channel: true,
      norm: true,
      gated,
      env: (most === '' ? {} : { CHORUS_QUANT_PAIR_THREADS: most }) as Record<string, string>,
      rows: [1],
    })),
  ),
  { name: 'int8 QL chan', op: 'QuantLinear', bits: 8, channel: true, rows: [1] },
  // One row: the float16 kernels at a thread a chunk, at most 128 or 64 threads a block
  // (CHORUS_QUANT_PAIR_THREADS; the default takes a thread for each 2 chunks from K 4096).
  ...([8, 4] as const).flatMap((bits) =>
    ['256', '128', '64'].map((most) => ({ name: `int${bits} QL t${most}`, op: 'QuantLinear' as const, bits, env: { CHORUS_QUANT_PAIR_THREADS: most }, rows: [1] })),
  ),
  { name: 'int8 QL plain', op: 'QuantLinear', bits: 8, gemv: 'plain' },
  { name: 'int4 QL plain', op: 'QuantLinear', bits: 4, gemv: 'plain' },
  // Many rows: the tiles of weights dequantized in shared memory, the register tiles' 8 warps of one
  // fragment (the default: 4 warps of two), and their weights read into registers rather than through
  // stages in shared memory (CHORUS_QUANT_TILE_PIPE=0).
  { name: 'int8 QL wmma', op: 'QuantLinear', bits: 8, env: { CHORUS_QUANT_TILES: 'wmma' }, rows: [16, 64, 128] },
  { name: 'int4 QL wmma', op: 'QuantLinear', bits: 4, env: { CHORUS_QUANT_TILES: 'wmma' }, rows: [16, 64, 128] },
  { name: 'int4 QL 8 warps', op: 'QuantLinear', bits: 4, env: { CHORUS_QUANT_TILE_WARPS: '8' }, rows: [16, 64, 128] },
  { name: 'int8 QL regs', op: 'QuantLinear', bits: 8, env: { CHORUS_QUANT_TILE_PIPE: '0' }, rows: [16, 64, 128] },
  { name: 'int4 QL regs', op: 'QuantLinear', bits: 4, env: { CHORUS_QUANT_TILE_PIPE: '0' }, rows: [16, 64, 128] },
];
const VARIANTS = ALL_VARIANTS.filter((v) => process.env.QUANT_VARIANTS === undefined || process.env.QUANT_VARIANTS.split(',').includes(v.name));
const ROWS = (process.env.QUANT_ROWS ?? '1,8,16,64,128').split(',').map(Number);

interface Row {
  shape: string;
  K: number;
  N: number;
  M: number;
  variant: string;
  copies?: number;
  us?: number;
  gbs?: number;
  peakShare?: number;
  speedupOverFp16?: number;
  /** QuantLinear: the largest relative difference from MatMulNBits' outputs. */
  vsMatMulNBits?: number;
  error?: string;
}

const rows: Row[] = [];
let parityCases: ParityCase[] = [];
const save = (): void => {
  const device = { gpuMemory: addon.gpuMemory(0) };
  writeFileSync(join(out, 'quant-kernels.json'), `${JSON.stringify({ date: new Date().toISOString(), iterations, peakGBs: PEAK_GBS, device, parity: parityCases, rows }, null, 2)}\n`);
};

if (process.env.QUANT_PARITY !== '0') {
  parityCases = parity(addon, work, Math.min(deadline, started + 40_000));
  const failed = parityCases.filter((c) => !c.ok);
  console.log(`parity (QuantLinear CUDA against its CPU path): ${parityCases.length - failed.length}/${parityCases.length} within tolerance (the cases its 40 s allowed)`);
  for (const c of failed) console.log(`  FAILED ${c.name}: ${c.error ?? `relative error ${c.worst} > ${c.tolerance}`}`);
  save();
}

const pad = (s: string | number, n: number): string => String(s).padStart(n);
console.log(`\n${'shape'.padEnd(18)} ${pad('M', 3)} ${'variant'.padEnd(17)} ${pad('us', 8)} ${pad('GB/s', 7)} ${pad('% peak', 6)} ${pad('x fp16', 6)} ${pad('vs ORT', 8)}`);
for (const shape of SHAPES) {
  const { K, N } = shape;
  // One set of weights per kind, shared by MatMulNBits and QuantLinear of the same bits.
  const weights = new Map<string, Weights>();
  const outputs = new Map<string, Uint8Array>();
  const xs = new Map(ROWS.map((M) => [M, activations(M, K)]));
  for (const v of VARIANTS) {
    if (v.gated === true && N % 2 !== 0) continue;
    const key = v.bits === undefined ? v.op : `int${v.bits}${v.channel === true ? ' channel' : ''}`;
    if (!weights.has(key)) weights.set(key, makeWeights(v, K, N));
    const w = weights.get(key)!;
    const perCopy = trafficBytes(w, 0, K, N, v);
    const copies = Math.max(2, Math.min(64, Math.ceil((128 << 20) / perCopy)));
    const path = join(work, 'model.onnx');
    let written = false;
    for (const M of ROWS.filter((m) => (v.gemv === undefined || m <= 8) && (v.rows === undefined || v.rows.includes(m)))) {
      const row: Row = { shape: shape.name, K, N, M, variant: v.name, copies };
      rows.push(row);
      if (Date.now() > deadline) {
        row.error = 'left out: the time budget ran out';
        continue;
      }
      try {
        if (!written) writeFileSync(path, modelBytes(v, w, K, N, copies));
        written = true;
        const env = { ...v.env, ...(v.gemv === undefined ? {} : { CHORUS_QUANT_GEMV: v.gemv }) };
        Object.assign(process.env, env);
        let result: ReturnType<typeof addon.runGraph>;
        try {
          const inputs = [{ name: 'x', type: 'float16' as const, dims: [M, K], data: xs.get(M)! }];
          if (v.norm === true) inputs.push({ name: 'r', type: 'float16' as const, dims: [M, K], data: xs.get(M)! });
          result = addon.runGraph({ model: path, provider: 'cuda', dtype: 'fp16', cudaGraph: true, iterations }, inputs);
        } finally {
          for (const name of Object.keys(env)) delete process.env[name];
        }
        row.us = (result.ms * 1000) / copies;
        row.gbs = trafficBytes(w, M, K, N, v) / (row.us * 1e3);
        row.peakShare = row.gbs / PEAK_GBS;
        const fp16 = rows.find((r) => r.shape === shape.name && r.M === M && r.variant === 'fp16 MatMul');
        if (fp16?.us !== undefined) row.speedupOverFp16 = fp16.us / row.us;
        const y0 = result.outputs.find((o) => o.name === 'y0')!.data;
        if (v.op === 'MatMulNBits') outputs.set(`${v.bits}:${M}`, y0);
        const reference = outputs.get(`${v.bits}:${M}`);
        if (v.op === 'QuantLinear' && reference !== undefined && v.norm !== true && v.channel !== true) row.vsMatMulNBits = maxRelative(y0, reference);
      } catch (error) {
        row.error = String(error).slice(0, 300);
      }
      const cell = (x: number | undefined, digits: number, n: number): string => pad(x === undefined ? '-' : x.toFixed(digits), n);
      console.log(
        `${shape.name.padEnd(18)} ${pad(M, 3)} ${v.name.padEnd(17)} ${cell(row.us, 1, 8)} ${cell(row.gbs, 0, 7)} ${cell(row.peakShare === undefined ? undefined : row.peakShare * 100, 0, 6)} ${cell(row.speedupOverFp16, 2, 6)} ${cell(row.vsMatMulNBits, 5, 8)}${row.error === undefined ? '' : `  ${row.error}`}`,
      );
      save();
    }
  }
}
console.log(`\nwrote ${join(out, 'quant-kernels.json')} in ${((Date.now() - started) / 1000).toFixed(0)} s`);

/** The largest |a - b| / (1 + |b|) of two float16 arrays' values. */
function maxRelative(a: Uint8Array, b: Uint8Array): number {
  const x = new Uint16Array(a.buffer, a.byteOffset, a.byteLength / 2);
  const y = new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    const u = half(x[i]!);
    const v = half(y[i]!);
    const e = Math.abs(u - v) / (1 + Math.abs(v));
    if (Number.isNaN(e) || e > worst) worst = e;
  }
  return worst;
}

function half(bits: number): number {
  const exponent = (bits >> 10) & 31;
  const mantissa = bits & 1023;
  const magnitude = exponent === 0 ? mantissa * 2 ** -24 : exponent === 31 ? (mantissa ? Number.NaN : Infinity) : (1 + mantissa / 1024) * 2 ** (exponent - 15);
  return bits & 0x8000 ? -magnitude : magnitude;
}
