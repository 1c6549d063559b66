/**
 * Generation throughput on this CPU: Chorus's engine against transformers.js `generate`, on the same
 * ONNX files (built by `chorus build`), same onnxruntime-node, greedy, 64 new tokens per request, no
 * early stop. Rows: one request; 16 concurrent requests (Chorus batches them continuously;
 * transformers.js runs 16 separate generate calls, and, as a second row, one padded batch of 16).
 * Usage: node --import tsx bench/cpu/engine-vs-transformersjs.ts   (prints a table, writes JSON)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { lastValueFrom, toArray } from 'rxjs';
import { OrtEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';

env.allowRemoteModels = false;
const NEW_TOKENS = 64;
const PROMPT = 16;
const work = join(tmpdir(), 'chorus-bench-cpu');

interface Row {
  model: string;
  setting: string;
  requests: number;
  chorusTokensPerS: number;
  transformersJsTokensPerS: number;
  ratio: number;
}

function prompts(count: number, vocab: number): number[][] {
  let state = 12345;
  return Array.from({ length: count }, () =>
    Array.from({ length: PROMPT }, () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return 3 + ((state >>> 8) % (vocab - 3));
    }),
  );
}

async function timeIt(run: () => Promise<unknown>): Promise<number> {
  await run(); // warm-up
  const started = performance.now();
  await run();
  return (performance.now() - started) / 1000;
}

async function benchModel(name: string, dir: string, vocab: number): Promise<Row[]> {
  const engine = await OrtEngine.open(dir, { maxBatchSize: 16 });
  const model = await AutoModelForCausalLM.from_pretrained(dir, { local_files_only: true, dtype: 'fp32', device: 'cpu', model_file_name: 'decoder_model_merged' });
  const chorus = (batch: number[][]) =>
    Promise.all(batch.map((p) => lastValueFrom(engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW_TOKENS, min_length: NEW_TOKENS } }).pipe(toArray()))));
  const tjs = (p: number[]) =>
    model.generate({ input_ids: new Tensor('int64', BigInt64Array.from(p, BigInt), [1, p.length]), max_new_tokens: NEW_TOKENS, min_new_tokens: NEW_TOKENS, do_sample: false });
  const tjsBatch = (batch: number[][]) =>
    model.generate({
      input_ids: new Tensor('int64', BigInt64Array.from(batch.flat(), BigInt), [batch.length, PROMPT]),
      attention_mask: new Tensor('int64', new BigInt64Array(batch.length * PROMPT).fill(1n), [batch.length, PROMPT]),
      max_new_tokens: NEW_TOKENS,
      min_new_tokens: NEW_TOKENS,
      do_sample: false,
    });
  const one = prompts(1, vocab);
  const sixteen = prompts(16, vocab);
  const rows: Row[] = [];
  const add = (setting: string, requests: number, chorusS: number, tjsS: number): void => {
    const tokens = requests * NEW_TOKENS;
    rows.push({ model: name, setting, requests, chorusTokensPerS: tokens / chorusS, transformersJsTokensPerS: tokens / tjsS, ratio: tjsS / chorusS });
  };
  const chorusOne = await timeIt(() => chorus(one));
  add('batch 1', 1, chorusOne, await timeIt(() => tjs(one[0]!)));
  const chorusSixteen = await timeIt(() => chorus(sixteen));
  add('16 concurrent (transformers.js: 16 generate calls)', 16, chorusSixteen, await timeIt(() => Promise.all(sixteen.map(tjs))));
  add('16 concurrent (transformers.js: one batch of 16)', 16, chorusSixteen, await timeIt(() => tjsBatch(sixteen)));
  await engine.close();
  await model.dispose();
  return rows;
}

mkdirSync(work, { recursive: true });
buildModel({ source: join(import.meta.dirname, '../../../shared/models/stories260K/stories260K.bin'), out: join(work, 'stories260K') });
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'gpt2-124m-ckpt') });
buildModel({ source: join(work, 'gpt2-124m-ckpt'), out: join(work, 'gpt2-124m') });
const rows = [...(await benchModel('stories260K', join(work, 'stories260K'), 512)), ...(await benchModel('GPT-2 124M (random)', join(work, 'gpt2-124m'), 50257))];

const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'setting', 'Chorus tok/s', 'transformers.js tok/s', 'Chorus / transformers.js']));
console.log(line(['---', '---', '---:', '---:', '---:']));
for (const r of rows) console.log(line([r.model, r.setting, r.chorusTokensPerS.toFixed(0), r.transformersJsTokensPerS.toFixed(0), `${r.ratio.toFixed(2)}x`]));
const out = join(import.meta.dirname, '../results', `cpu-engine-vs-transformersjs-${new Date().toISOString().slice(0, 10)}.json`);
writeFileSync(out, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, newTokens: NEW_TOKENS, promptTokens: PROMPT, rows }, null, 2)}\n`);
console.log(`\nwrote ${out}`);
