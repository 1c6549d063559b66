/**
 * Chorus and node-llama-cpp (llama.cpp) on the same weights, side by side in one run: each model is
 * exported by `chorus export gguf` for node-llama-cpp and built by `chorus build` for Chorus; the same
 * random prompts (token ids, so no tokenizer is in the way), greedy, PEER_NEW new tokens per request.
 * Settings: one request alone, then PEER_CONCURRENT requests at once (node-llama-cpp: one context with
 * that many sequences, its recommended way; Chorus: that many concurrent requests into one engine).
 * Reported: output tokens/s of the whole setting (all requests' tokens over the wall time from the first
 * submission to the last token) and the median time to first token. One warm-up request, then one run.
 *
 * CPU (this machine): stories260K (llama2.c) and a Qwen2-0.5B shape (random weights), f32; Chorus runs
 * its CPU default, the native engine (its TypeScript engine where the addon is not built), min_length =
 * new tokens, no early stop; llama.cpp the prebuilt CPU binary, no early stop either (end tokens are
 * yielded and generation goes on).
 *   node --import tsx bench/peer/side-by-side.ts
 * CUDA (bench/peer/cuda.sh sets it up): PEER_DEVICE=cuda PEER_CHECKPOINTS=<dir of HF checkpoints>:
 * fp16 / GGUF f16; Chorus runs its native engine with CUDA graphs (greedy rows pick on the device; a
 * row may end at an end token, so tokens/s counts the tokens actually generated, on both sides);
 * llama.cpp the build `node-llama-cpp source build --gpu cuda` made, every layer on the GPU.
 * Knobs: PEER_MODELS (comma list), PEER_PROMPT (32 on CPU, 96 on CUDA), PEER_NEW (128),
 * PEER_CONCURRENT (16), PEER_REPEAT (runs of each setting, the median kept; default 1), PEER_THREADS (llama.cpp's CPU threads; default: the cores), CHORUS_ORT_THREADS
 * (ONNX Runtime's intra-op threads, see ort-threads.ts; default: ONNX Runtime's), PEER_WORK (a
 * directory to keep checkpoints and builds in between runs). Writes bench/results/<device>-chorus-vs-node-llama-cpp-<date>.json (or $OUT/).
 */
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Observable } from 'rxjs';
import { exportGguf } from '../../src/export/gguf/index.ts';
import { NativeEngine, nativeUnavailable, OrtEngine, type Engine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { applyOrtThreads } from './ort-threads.ts';
import { ensurePeer, openPeer, peerGreedy } from './peer.ts';
import { placeholderTokenizer, summarize, type Row, type Run } from './report.ts';

const ROOT = join(import.meta.dirname, '../..');
const DEVICE = (process.env.PEER_DEVICE ?? 'cpu') as 'cpu' | 'cuda';
const PROMPT = Number(process.env.PEER_PROMPT ?? (DEVICE === 'cpu' ? 32 : 96));
const NEW = Number(process.env.PEER_NEW ?? 128);
const CONCURRENT = Number(process.env.PEER_CONCURRENT ?? 16);
const THREADS = Number(process.env.PEER_THREADS ?? cpus().length);
const REPEAT = Number(process.env.PEER_REPEAT ?? 1);
const work = process.env.PEER_WORK ?? join(tmpdir(), 'chorus-peer');
mkdirSync(work, { recursive: true });

interface ModelCase {
  name: string;
  /** A Hugging Face checkpoint directory or a llama2.c .bin. */
  source: string;
  vocab: number;
  tokenizer?: string;
}

function cpuModels(): ModelCase[] {
  const qwen = join(work, 'qwen2-0.5b');
  if (!existsSync(join(qwen, 'model.safetensors'))) makeCheckpoint({ arch: 'qwen2', size: 'real', seed: 1, out: qwen });
  return [
    { name: 'stories260K', source: join(ROOT, '../shared/models/stories260K/stories260K.bin'), vocab: 512 },
    { name: 'Qwen2-0.5B shape', source: qwen, vocab: 151936, tokenizer: join(ROOT, '../shared/tokenizers/gpt2/tokenizer.json') },
  ];
}

/** CUDA: every checkpoint directory under PEER_CHECKPOINTS (cuda.sh writes tinyllama-1.1b and llama-2-7b). */
function cudaModels(): ModelCase[] {
  const dir = process.env.PEER_CHECKPOINTS;
  if (dir === undefined) throw new Error('PEER_DEVICE=cuda needs PEER_CHECKPOINTS (bench/peer/cuda.sh sets it)');
  return readdirSync(dir).sort().map((name) => {
    const source = join(dir, name);
    const tokenizer = join(work, `${name}-tokenizer.bin`);
    placeholderTokenizer(tokenizer, 32000);
    return { name, source, vocab: 32000, tokenizer };
  });
}

/** Fixed pseudo-random prompts of PROMPT ids in [3, vocab). */
function prompts(count: number, vocab: number): number[][] {
  let state = 2024;
  return Array.from({ length: count }, () =>
    Array.from({ length: PROMPT }, () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return 3 + ((state >>> 8) % (vocab - 3));
    }),
  );
}

/** `REPEAT` runs of `once`: the one of median tokens/s. */
async function median(once: () => Promise<Run>): Promise<Run> {
  const runs: Run[] = [];
  for (let i = 0; i < REPEAT; i++) runs.push(await once());
  return runs.sort((a, b) => a.tokens / a.seconds - b.tokens / b.seconds)[Math.floor((runs.length - 1) / 2)]!;
}

/** Runs `requests` at once; each resolves to its token count and the ms to its first token. */
async function timed(requests: Array<(onToken: () => void) => Promise<number>>): Promise<Run> {
  const started = performance.now();
  const results = await Promise.all(
    requests.map(async (request) => {
      let first: number | undefined;
      const tokens = await request(() => void (first ??= performance.now() - started));
      return { tokens, ttftMs: first ?? Number.NaN };
    }),
  );
  return { seconds: (performance.now() - started) / 1000, tokens: results.reduce((a, r) => a + r.tokens, 0), ttftMs: results.map((r) => r.ttftMs) };
}

function chorusRequest(engine: Engine, prompt: number[], steps: number) {
  return (onToken: () => void): Promise<number> =>
    new Promise((resolve, reject) => {
      let count = 0;
      const params = { temperature: 0, request_output_len: steps, ...(DEVICE === 'cpu' ? { min_length: steps } : {}) };
      (engine.submit({ inputIds: prompt, params }) as Observable<unknown>).subscribe({ next: () => (onToken(), count++), error: reject, complete: () => resolve(count) });
    });
}

async function chorus(model: ModelCase, settings: number[]): Promise<Map<number, Run>> {
  const dir = join(work, `${model.name.replace(/\W+/g, '-')}-chorus-${DEVICE}-slots`);
  if (!existsSync(join(dir, 'chorus_build.json'))) {
    buildModel({ source: model.source, out: dir, flavor: 'cuda', slotDecoder: true, ...(DEVICE === 'cuda' ? { dtype: 'fp16' as const } : {}) });
  }
  // What a model definition opens by default: the native engine, or the TypeScript one without the addon.
  const native = nativeUnavailable(dir) === undefined;
  chorusEngine = DEVICE === 'cuda' ? 'native engine, CUDA graphs' : native ? 'native engine' : 'TypeScript engine';
  const engine: Engine =
    DEVICE === 'cuda'
      ? await NativeEngine.open(dir, { provider: 'cuda', maxBatchSize: CONCURRENT, slotLength: PROMPT + NEW, cudaGraph: true })
      : native
        ? await NativeEngine.open(dir, { maxBatchSize: CONCURRENT, slotLength: PROMPT + NEW, ...(ortThreads === undefined ? {} : { intraOpThreads: ortThreads }) })
        : await OrtEngine.open(dir, { maxBatchSize: CONCURRENT });
  const runs = new Map<number, Run>();
  try {
    await timed([chorusRequest(engine, prompts(1, model.vocab)[0]!, 4)]);
    for (const n of settings) runs.set(n, await median(() => timed(prompts(n, model.vocab).map((p) => chorusRequest(engine, p, NEW)))));
  } finally {
    await engine.close();
  }
  return runs;
}

async function llamaCpp(model: ModelCase, settings: number[]): Promise<Map<number, Run>> {
  const gguf = join(work, `${model.name.replace(/\W+/g, '-')}-${DEVICE === 'cpu' ? 'f32' : 'f16'}.gguf`);
  if (!existsSync(gguf)) exportGguf({ source: model.source, out: gguf, type: DEVICE === 'cpu' ? 'f32' : 'f16', tokenizer: model.tokenizer });
  const llama = await openPeer(DEVICE === 'cpu' ? 'cpu' : 'lastBuild');
  if (DEVICE === 'cuda' && llama.gpu !== 'cuda') throw new Error(`node-llama-cpp loaded a ${String(llama.gpu)} build, not CUDA: run bench/peer/cuda.sh, which builds it`);
  const loaded = await llama.loadModel({ modelPath: gguf, gpuLayers: DEVICE === 'cpu' ? 0 : 'max' });
  const runs = new Map<number, Run>();
  try {
    for (const n of settings) {
      const context = await loaded.createContext({ contextSize: PROMPT + NEW, sequences: n, ...(DEVICE === 'cpu' ? { threads: THREADS } : {}) });
      const sequences = Array.from({ length: n }, () => context.getSequence());
      await peerGreedy(sequences[0]!, prompts(1, model.vocab)[0]!, 4);
      const once = async (): Promise<Run> => {
        await Promise.all(sequences.map((sequence) => sequence.clearHistory()));
        return timed(prompts(n, model.vocab).map((p, i) => (onToken: () => void) => peerGreedy(sequences[i]!, p, NEW, onToken).then((t) => t.length)));
      };
      runs.set(n, await median(once));
      await context.dispose();
    }
  } finally {
    await loaded.dispose();
    await llama.dispose();
  }
  return runs;
}

const ortThreads = applyOrtThreads();
let chorusEngine = '';
const peer = await ensurePeer();
if (!peer.ok) throw new Error(peer.reason);
const models = (DEVICE === 'cpu' ? cpuModels() : cudaModels()).filter((m) => process.env.PEER_MODELS === undefined || process.env.PEER_MODELS.split(',').includes(m.name));
const settings = CONCURRENT > 1 ? [1, CONCURRENT] : [1];
const rows: Row[] = [];
const failures: Array<{ model: string; error: string }> = [];
const date = new Date().toISOString().slice(0, 10);
const out = join(process.env.OUT ?? join(ROOT, 'bench/results'), `${DEVICE}-chorus-vs-node-llama-cpp-${date}.json`);
const setup = { device: DEVICE, cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, nodeLlamaCpp: '3.21.1', promptTokens: PROMPT, newTokens: NEW, concurrent: CONCURRENT, runsPerSetting: REPEAT, llamaCppThreads: DEVICE === 'cpu' ? THREADS : undefined, chorusOrtThreads: ortThreads ?? 'default (one per core)' };
for (const model of models) {
  // A model that fails (on either side) is reported and the next one still runs.
  try {
    const ours = await chorus(model, settings);
    const theirs = await llamaCpp(model, settings);
    rows.push(...summarize(model.name, settings, ours, theirs));
    console.error(`${model.name}: done`);
  } catch (error) {
    failures.push({ model: model.name, error: (error as Error).stack ?? String(error) });
    console.error(`${model.name}: failed: ${(error as Error).message}`);
  }
  writeFileSync(out, `${JSON.stringify({ ...setup, chorusEngine, rows, failures }, null, 2)}\n`);
}

const line = (cells: Array<string | number>): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'setting', 'Chorus tok/s', 'node-llama-cpp tok/s', 'Chorus / node-llama-cpp', 'Chorus TTFT ms', 'node-llama-cpp TTFT ms']));
console.log(line(['---', '---', '---:', '---:', '---:', '---:', '---:']));
for (const r of rows) console.log(line([r.model, r.setting, r.chorus.tokensPerS.toFixed(0), r.peer.tokensPerS.toFixed(0), `${r.ratio.toFixed(2)}x`, r.chorus.ttftMs.toFixed(0), r.peer.ttftMs.toFixed(0)]));
for (const f of failures) console.log(`${f.model}: failed: ${f.error.split('\n')[0]}`);
console.log(`\nwrote ${out}`);
process.exit(failures.length > 0 ? 1 : 0);
