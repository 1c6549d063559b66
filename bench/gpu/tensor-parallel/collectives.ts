/**
 * The NCCL collectives on a two-GPU host, through the addon's runGraphRanks: a graph of AllReduce and
 * AllGather run on ranks 0 and 1 (GPUs 0 and 1) in fp32, fp16 and bf16, one row and several, as plain
 * runs and as captured CUDA graphs, each output checked against the sum and concatenation computed
 * here; then a rank that never runs its session (the watchdog must end the call with its error within
 * the timeout) and a rank that fails before its collective (the other must be freed at once). Prints a
 * table and writes <out>/tp-collectives.json.
 * Usage: node --import tsx bench/gpu/tensor-parallel/collectives.ts [out-dir]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeRaw, encodeFloats, type FloatType } from '../../../src/modelbuild/float-bits.ts';
import { GraphBuilder } from '../../../src/modelbuild/graph.ts';
import { loadNative, type GraphTensor } from '../../../src/native/index.ts';

const out = process.argv[2] ?? join(tmpdir(), 'tp-collectives');
mkdirSync(out, { recursive: true });
const { addon, reason } = loadNative();
if (addon === undefined || !addon.cuda) throw new Error(`the CUDA addon is needed: ${reason}`);
const DTYPES: Record<FloatType, 'fp32' | 'fp16' | 'bf16'> = { float32: 'fp32', float16: 'fp16', bfloat16: 'bf16' };
const RAW: Record<FloatType, 'F32' | 'F16' | 'BF16'> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };

function model(type: FloatType): string {
  const g = new GraphBuilder(type);
  const x = g.input('x', type, ['rows', 'n']);
  g.output('sum', g.op('AllReduce', [x], { world_size: 2 }, { domain: 'chorus' }), type, ['rows', 'n']);
  g.output('gathered', g.op('AllGather', [x], { world_size: 2 }, { domain: 'chorus' }), type, ['rows', 'gathered_n']);
  const path = join(out, `collectives-${type}.onnx`);
  writeFileSync(path, g.serialize().model);
  return path;
}

function values(count: number, seed: number, type: FloatType): Float32Array {
  let s = seed;
  const wide = Float32Array.from({ length: count }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 4 - 2);
  return decodeRaw(encodeFloats(wide, type), RAW[type]);
}

const rows: Array<Record<string, unknown>> = [];
for (const type of ['float32', 'float16', 'bfloat16'] as const) {
  for (const shape of [[1, 4096], [8, 5120]] as const) {
    for (const cudaGraph of [false, true]) {
      const [r, n] = shape;
      const xs = [values(r * n, 3, type), values(r * n, 4, type)];
      const inputs: GraphTensor[][] = xs.map((x) => [{ name: 'x', type, dims: [r, n], data: encodeFloats(Float32Array.from(x), type) }]);
      const row: Record<string, unknown> = { type, rows: r, n, cudaGraph };
      try {
        const results = addon.runGraphRanks({ model: model(type), provider: 'cuda', dtype: DTYPES[type], deviceIds: [0, 1], cudaGraph, iterations: 20 }, inputs);
        let sumError = 0;
        let gatherWrong = 0;
        for (const { outputs } of results) {
          const byName = new Map(outputs.map((o) => [o.name, decodeRaw(o.data, RAW[type])]));
          const sum = byName.get('sum')!;
          const gathered = byName.get('gathered')!;
          for (let i = 0; i < r * n; i++) sumError = Math.max(sumError, Math.abs(sum[i]! - (xs[0]![i]! + xs[1]![i]!)));
          for (let row = 0; row < r; row++) {
            for (let rank = 0; rank < 2; rank++) {
              for (let j = 0; j < n; j++) if (gathered[(row * 2 + rank) * n + j] !== xs[rank]![row * n + j]) gatherWrong++;
            }
          }
        }
        Object.assign(row, { sum_max_error: sumError, gather_wrong: gatherWrong, ms_rank0: results[0]!.ms, ok: gatherWrong === 0 && sumError <= (type === 'float32' ? 1e-6 : 2e-2) });
      } catch (error) {
        Object.assign(row, { ok: false, error: String(error) });
      }
      rows.push(row);
    }
  }
}

// A rank that never runs: rank 0 waits in its collective until the watchdog aborts the group.
const started = performance.now();
let hung = '';
try {
  addon.runGraphRanks({ model: model('float16'), provider: 'cuda', dtype: 'fp16', deviceIds: [0, 1], timeoutMs: 3000, absent: 1 }, [0, 1].map(() => [{ name: 'x', type: 'float16', dims: [1, 8], data: new Uint8Array(16) }]));
  hung = 'no error';
} catch (error) {
  hung = String(error);
}
const absent = { error: hung, seconds: (performance.now() - started) / 1000, ok: /made no progress|never arrived|aborted/.test(hung) };

// A rank that fails before its collective (an input its graph does not have): rank 0, waiting in
// NCCL, must be freed at once (its communicator aborted), not after the timeout.
const failedAt = performance.now();
let failedError = '';
try {
  const good = { name: 'x', type: 'float16' as const, dims: [1, 8], data: new Uint8Array(16) };
  addon.runGraphRanks({ model: model('float16'), provider: 'cuda', dtype: 'fp16', deviceIds: [0, 1], timeoutMs: 60000 }, [[good], [{ ...good, name: 'not_an_input' }]]);
  failedError = 'no error';
} catch (error) {
  failedError = String(error);
}
const failed = { error: failedError, seconds: (performance.now() - failedAt) / 1000, ok: /tensor-parallel rank 1 failed: .*not_an_input/.test(failedError) };

console.table(rows.map((r) => ({ type: r.type, rows: r.rows, n: r.n, graph: r.cudaGraph, ok: r.ok, sum_err: r.sum_max_error, gather_wrong: r.gather_wrong, ms: r.ms_rank0, error: r.error })));
console.log(`absent rank: ${absent.ok ? 'ok' : 'FAILED'} after ${absent.seconds.toFixed(1)} s (timeout 3 s): ${absent.error}`);
console.log(`failing rank: ${failed.ok ? 'ok' : 'FAILED'} after ${failed.seconds.toFixed(1)} s (timeout 60 s): ${failed.error}`);
writeFileSync(join(out, 'tp-collectives.json'), JSON.stringify({ rows, absent, failed }, null, 2));
