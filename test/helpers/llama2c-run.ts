/**
 * llama2.c's run.c forward pass, ported line for line (float64 arithmetic instead of float32). It reads
 * the .bin itself and rotates interleaved pairs as run.c does, sharing no code with the builder: an
 * independent reference for what the built ONNX model must compute.
 */
import { readFileSync } from 'node:fs';

export class Llama2cReference {
  private readonly w: Record<string, Float32Array> = {};
  private readonly keyCache: Float64Array[];
  private readonly valueCache: Float64Array[];
  readonly dim: number;
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly vocab: number;
  readonly seqLen: number;

  constructor(file: string) {
    const bytes = readFileSync(file);
    const header = new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 28));
    [this.dim, this.hidden, this.layers, this.heads, this.kvHeads, this.vocab, this.seqLen] = Array.from(header) as [number, number, number, number, number, number, number];
    this.vocab = Math.abs(this.vocab);
    const floats = new Float32Array(bytes.buffer.slice(bytes.byteOffset + 28, bytes.byteOffset + bytes.length));
    const headSize = this.dim / this.heads;
    const kvDim = (this.dim * this.kvHeads) / this.heads;
    let at = 0;
    const take = (name: string, count: number): void => {
      this.w[name] = floats.subarray(at, at + count);
      at += count;
    };
    const { dim, hidden, layers, vocab } = this;
    take('token_embedding', vocab * dim);
    take('rms_att', layers * dim);
    take('wq', layers * dim * dim);
    take('wk', layers * dim * kvDim);
    take('wv', layers * dim * kvDim);
    take('wo', layers * dim * dim);
    take('rms_ffn', layers * dim);
    take('w1', layers * dim * hidden);
    take('w2', layers * hidden * dim);
    take('w3', layers * dim * hidden);
    take('rms_final', dim);
    at += this.seqLen * headSize; // freq_cis_real, freq_cis_imag
    this.w.wcls = header[5]! > 0 ? this.w.token_embedding! : floats.subarray(at, at + vocab * dim);
    this.keyCache = Array.from({ length: layers }, () => new Float64Array(this.seqLen * kvDim));
    this.valueCache = Array.from({ length: layers }, () => new Float64Array(this.seqLen * kvDim));
  }

  /** The logits after feeding `token` at position `pos` (positions must be fed in order from 0). */
  forward(token: number, pos: number): Float64Array {
    const { dim, hidden, heads, kvHeads, w } = this;
    const headSize = dim / heads;
    const kvDim = (dim * kvHeads) / heads;
    const kvMul = heads / kvHeads;
    const x = Float64Array.from(w.token_embedding!.subarray(token * dim, (token + 1) * dim));
    for (let l = 0; l < this.layers; l++) {
      const xb = rmsnorm(x, w.rms_att!.subarray(l * dim, (l + 1) * dim));
      const q = matmul(xb, w.wq!.subarray(l * dim * dim), dim, dim);
      const k = matmul(xb, w.wk!.subarray(l * dim * kvDim), dim, kvDim);
      const v = matmul(xb, w.wv!.subarray(l * dim * kvDim), dim, kvDim);
      for (let i = 0; i < dim; i += 2) {
        const headDim = i % headSize;
        const freq = 1 / Math.pow(10000, headDim / headSize);
        const val = pos * freq;
        const [fcr, fci] = [Math.cos(val), Math.sin(val)];
        for (const vec of i < kvDim ? [q, k] : [q]) {
          const [v0, v1] = [vec[i]!, vec[i + 1]!];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      this.keyCache[l]!.set(k, pos * kvDim);
      this.valueCache[l]!.set(v, pos * kvDim);
      const attended = new Float64Array(dim);
      for (let h = 0; h < heads; h++) {
        const offset = Math.floor(h / kvMul) * headSize;
        const att = new Float64Array(pos + 1);
        for (let t = 0; t <= pos; t++) {
          let score = 0;
          for (let i = 0; i < headSize; i++) score += q[h * headSize + i]! * this.keyCache[l]![t * kvDim + offset + i]!;
          att[t] = score / Math.sqrt(headSize);
        }
        softmax(att);
        for (let t = 0; t <= pos; t++) {
          for (let i = 0; i < headSize; i++) attended[h * headSize + i]! += att[t]! * this.valueCache[l]![t * kvDim + offset + i]!;
        }
      }
      const out = matmul(attended, w.wo!.subarray(l * dim * dim), dim, dim);
      for (let i = 0; i < dim; i++) x[i]! += out[i]!;
      const xb2 = rmsnorm(x, w.rms_ffn!.subarray(l * dim, (l + 1) * dim));
      const hb = matmul(xb2, w.w1!.subarray(l * dim * hidden), dim, hidden);
      const hb2 = matmul(xb2, w.w3!.subarray(l * dim * hidden), dim, hidden);
      for (let i = 0; i < hidden; i++) hb[i] = (hb[i]! / (1 + Math.exp(-hb[i]!))) * hb2[i]!;
      const down = matmul(hb, w.w2!.subarray(l * hidden * dim), hidden, dim);
      for (let i = 0; i < dim; i++) x[i]! += down[i]!;
    }
    return matmul(rmsnorm(x, w.rms_final!), w.wcls!, dim, this.vocab);
  }
}

/** out[i] = sum_j w[i * n + j] * x[j], for w of shape (d, n): run.c's matmul. */
function matmul(x: Float64Array, w: Float32Array, n: number, d: number): Float64Array {
  const out = new Float64Array(d);
  for (let i = 0; i < d; i++) {
    let sum = 0;
    for (let j = 0; j < n; j++) sum += w[i * n + j]! * x[j]!;
    out[i] = sum;
  }
  return out;
}

function rmsnorm(x: Float64Array, weight: Float32Array): Float64Array {
  let ss = 0;
  for (const value of x) ss += value * value;
  const scale = 1 / Math.sqrt(ss / x.length + 1e-5);
  return x.map((value, i) => weight[i]! * (scale * value));
}

function softmax(x: Float64Array): void {
  const max = Math.max(...x);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += x[i] = Math.exp(x[i]! - max);
  for (let i = 0; i < x.length; i++) x[i]! /= sum;
}
