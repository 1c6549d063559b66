/**
 * Do 64 mixed streams through the native engine give the tokens each gives alone? Greedy and seeded
 * sampled requests of mixed sources and lengths arrive 2 ms apart into 32 slots; each is also run
 * alone. Prints the count that match and, for each that does not, the step where it leaves its lone
 * run: a logic error shows early and everywhere, float rounding that depends on the batch late and here
 * and there. Runs in fp32 with TF32 off as well as fp16 to tell the two apart.
 * With `invariant`, the engine is batch-invariant (every step padded to its 32 slots, sources encoded alone).
 * Usage: node --import tsx bench/gpu/parity/streams.ts <work-dir> <arch> <size> <fp32|fp16> <cpu|cuda> [graph] [invariant]
 *   -> <work-dir>/streams-<arch>-<size>-<dtype>-<device>[-graph][-invariant].json
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NativeEngine } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint, type CheckpointArch, type CheckpointSize } from '../../../src/modelbuild/index.ts';
import { seededRows } from '../speed/common.ts';
import { mixedStreams } from './models.ts';

const [work = '/tmp/streams', arch = 't5', size = 'real', dtype = 'fp16', device = 'cuda', ...flags] = process.argv.slice(2);
const graph = flags.includes('graph');
const invariant = flags.includes('invariant');
const tag = `${graph ? '-graph' : ''}${invariant ? '-invariant' : ''}`;
const checkpoint = join(work, `${arch}-${size}-ckpt`);
if (!existsSync(join(checkpoint, 'config.json'))) makeCheckpoint({ arch: arch as CheckpointArch, size: size as CheckpointSize, seed: 3, out: checkpoint });
const dir = join(work, `${arch}-${size}-${dtype}`);
if (!existsSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))) buildModel({ source: checkpoint, out: dir, dtype: dtype as 'fp32' | 'fp16', slotDecoder: true, ...(arch === 'gpt2' || arch === 'qwen2' || arch === 'llama' ? { flavor: 'cuda' as const } : {}) });
const engine = await NativeEngine.open(dir, {
  provider: device as 'cpu' | 'cuda',
  maxBatchSize: 32,
  slotLength: 128,
  cudaGraph: graph,
  batchInvariant: invariant,
  ...(device === 'cuda' ? { cudaOptions: { use_tf32: 0 } } : {}),
});
const vocab = (JSON.parse(readFileSync(join(dir, 'chorus_build.json'), 'utf8')) as { spec: { vocabSize: number } }).spec.vocabSize;
const sources = seededRows(8, 40, Math.min(30000, vocab)).map((row, i) => row.slice(0, 4 + ((i * 5) % 36)));
const { streamsAlone: alone, streamsTogether: together } = await mixedStreams(engine, sources);
await engine.close();
const differing = together.flatMap((t, i) => {
  const step = t.findIndex((token, j) => token !== alone[i]![j]);
  return step === -1 && t.length === alone[i]!.length ? [] : [{ stream: i, step: step === -1 ? Math.min(t.length, alone[i]!.length) : step, length: alone[i]!.length }];
});
const result = { arch, size, dtype, device, graph, batchInvariant: invariant, asAlone: 64 - differing.length, of: 64, differing };
writeFileSync(join(work, `streams-${arch}-${size}-${dtype}-${device}${tag}.json`), JSON.stringify(result, null, 2));
process.stdout.write(`${arch} ${size} ${dtype} ${device}${tag.replaceAll('-', ' ')}: ${result.asAlone}/64 as alone; leaving at (step/length): ${differing.map((d) => `${d.step}/${d.length}`).join(' ')}\n`);
