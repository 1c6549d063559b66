/**
 * Where Chorus's CPU time goes in the side-by-side's settings: the same requests through OrtEngine (one
 * request, then PEER_CONCURRENT at once; greedy, PEER_NEW new tokens, min_length = new tokens), split
 * into time inside ONNX Runtime's session.run and the rest (the JavaScript step loop: logits processing,
 * argmax, cache bookkeeping, the event loop), with the JavaScript functions that took the most self time
 * (V8's sampling profiler).
 * Usage: node --import tsx bench/peer/profile-cpu.ts <built model dir> [vocab]   (prints a table)
 * CHORUS_ORT_THREADS=n: ONNX Runtime's intra-op threads (see ort-threads.ts).
 * side-by-side.ts leaves the built models in its work directory ($TMPDIR/chorus-peer by default).
 */
import { Session } from 'node:inspector/promises';
import { OrtEngine } from '../../src/generation/index.ts';
import { timeSessionRuns } from '../gpu/speed/common.ts';
import { applyOrtThreads } from './ort-threads.ts';

const dir = process.argv[2];
if (dir === undefined) throw new Error('usage: profile-cpu.ts <built model dir> [vocab]');
const vocab = Number(process.argv[3] ?? 512);
const PROMPT = Number(process.env.PEER_PROMPT ?? 32);
const NEW = Number(process.env.PEER_NEW ?? 128);
const CONCURRENT = Number(process.env.PEER_CONCURRENT ?? 16);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

const inRun = timeSessionRuns();
applyOrtThreads();
const engine = await OrtEngine.open(dir, { maxBatchSize: CONCURRENT });
let state = 7;
const prompt = (): number[] =>
  Array.from({ length: PROMPT }, () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return 3 + ((state >>> 8) % (vocab - 3));
  });
const generate = (p: number[]): Promise<void> =>
  new Promise((resolve, reject) => engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW, min_length: NEW } }).subscribe({ error: reject, complete: resolve }));

await generate(prompt());
const inspector = new Session();
inspector.connect();
await inspector.post('Profiler.enable');
console.log('| setting | wall s | in session.run | rest (JavaScript, event loop) | top self time (share of the profile) |');
console.log('| --- | ---: | ---: | ---: | --- |');
for (const n of [1, CONCURRENT]) {
  const prompts = Array.from({ length: n }, prompt);
  inRun.ms = 0;
  await inspector.post('Profiler.start');
  const started = performance.now();
  await Promise.all(prompts.map(generate));
  const wall = performance.now() - started;
  const { profile } = (await inspector.post('Profiler.stop')) as unknown as { profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] } };
  const self = new Map<string, number>();
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  profile.samples.forEach((id, i) => {
    const frame = byId.get(id)!.callFrame;
    const name = frame.url === '' ? frame.functionName || '(no script: native)' : `${frame.functionName || '(anonymous)'} ${frame.url.split('/').slice(-2).join('/')}`;
    self.set(name, (self.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  const sampled = [...self.values()].reduce((a, b) => a + b, 0);
  const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([name, ms]) => `${name} ${((100 * ms) / sampled).toFixed(0)}%`);
  const share = (ms: number): string => `${((100 * ms) / wall).toFixed(0)}%`;
  console.log(`| ${n === 1 ? 'batch 1' : `${n} concurrent`} | ${(wall / 1000).toFixed(2)} | ${share(inRun.ms)} | ${share(wall - inRun.ms)} | ${top.join('; ')} |`);
}
await engine.close();
process.exit(0);
