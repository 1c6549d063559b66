/**
 * Generation throughput on this CPU, side by side in one run: Chorus in-process (its engine, token ids)
 * and over HTTP (`chorus serve` in its own process, driven by `chorus bench`'s load generator through the
 * OpenAI completions route, streamed), against transformers.js on the same ONNX files (built by
 * `chorus build`) and the same onnxruntime-node: `generate` on token ids, and for GPT-2 (whose tokenizer
 * transformers.js can read) `pipeline('text-generation')` on text. Greedy, 16-token prompts, 64 new
 * tokens per request with no early stop. Settings: one request at a time, and 16 concurrent requests
 * (Chorus batches them continuously; transformers.js runs 16 concurrent calls and, as its best case, one
 * padded batch of 16). Every figure is the median of three runs after a warm-up.
 * Usage: node --import tsx bench/cpu/chorus-vs-transformersjs.ts   (prints a table, writes JSON + chart)
 */
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AutoModelForCausalLM, env, pipeline, Tensor, type TextGenerationPipeline } from '@huggingface/transformers';
import { lastValueFrom, toArray } from 'rxjs';
import { countPromptTokens, renderChart, runBench, syntheticPrompts, type Target } from '../../src/bench/index.ts';
import { OrtEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { medianOfThree, randomPrompts, serve, timeIt } from './common.ts';

env.allowRemoteModels = false;
const NEW_TOKENS = 64;
const PROMPT = 16;
const CONCURRENT = 16;
const ROOT = join(import.meta.dirname, '../..');
const SHARED = join(ROOT, '../shared');
const work = join(tmpdir(), 'chorus-bench-cpu');

interface Row {
  model: string;
  setting: string;
  system: string;
  requests: number;
  tokensPerS: number;
  /** This row's tokens/s over transformers.js generate's in the same setting (concurrent calls). */
  ratio?: number;
}

/** Output tokens/s of `requests` requests at `concurrency` through the server (median of three, after a warm-up). */
function overHttp(target: Target, prompts: string[], concurrency: number, requests: number): Promise<number> {
  const sampling = { max_tokens: NEW_TOKENS, min_tokens: NEW_TOKENS, temperature: 0 };
  return medianOfThree(async () => {
    const [result] = await runBench({ target, sampling, prompts, settings: [{ concurrency }], requests });
    const { summary } = result!;
    if (summary.ok !== requests || summary.outputTokens !== requests * NEW_TOKENS) throw new Error(`HTTP run incomplete: ${JSON.stringify(summary.errors)} ${result!.requests.find((r) => !r.ok)?.error}`);
    return summary.outputTokensPerS;
  });
}

interface ModelCase {
  name: string;
  dir: string;
  vocab: number;
  /** Repository lines: the tokenizer definition for the HTTP server. */
  tokenizer: string;
  /** A tokenizer.json transformers.js can read, when there is one. */
  tokenizerJson?: string;
}

async function benchModel(c: ModelCase): Promise<Row[]> {
  const rows: Row[] = [];
  const add = (setting: string, system: string, requests: number, seconds: number): void => {
    rows.push({ model: c.name, setting, system, requests, tokensPerS: (requests * NEW_TOKENS) / seconds });
  };
  // Chorus in-process.
  const engine = await OrtEngine.open(c.dir, { maxBatchSize: CONCURRENT });
  const chorus = (batch: number[][]) =>
    Promise.all(batch.map((p) => lastValueFrom(engine.submit({ inputIds: p, params: { temperature: 0, request_output_len: NEW_TOKENS, min_length: NEW_TOKENS } }).pipe(toArray()))));
  const one = randomPrompts(1, c.vocab, PROMPT);
  const many = randomPrompts(CONCURRENT, c.vocab, PROMPT);
  add('batch 1', 'Chorus engine, in-process', 1, await timeIt(() => chorus(one)));
  add(`${CONCURRENT} concurrent`, 'Chorus engine, in-process', CONCURRENT, await timeIt(() => chorus(many)));
  await engine.close();

  // Chorus over HTTP, in its own process.
  const repository = join(work, `repository-${c.name.replace(/\W+/g, '-')}`);
  for (const kind of ['tokenizers', 'models', 'pipelines']) mkdirSync(join(repository, kind), { recursive: true });
  writeFileSync(join(repository, 'tokenizers/bench.yaml'), c.tokenizer);
  writeFileSync(join(repository, 'models/bench.yaml'), `engine: generate\nsource: ${c.dir}\ntokenizer: bench\nmax_batch_size: ${CONCURRENT}\n`);
  writeFileSync(join(repository, 'pipelines/bench.yaml'), 'model: bench\n');
  const server = await serve(repository);
  try {
    const target: Target = { url: server.url, pipeline: 'bench', protocol: 'openai', stream: true, timeoutS: 600 };
    const { prompts } = await syntheticPrompts(PROMPT, CONCURRENT, (text) => countPromptTokens(target, text));
    const perS = await overHttp(target, prompts, 1, 2);
    rows.push({ model: c.name, setting: 'batch 1', system: 'Chorus server, over HTTP (streamed)', requests: 2, tokensPerS: perS });
    rows.push({ model: c.name, setting: `${CONCURRENT} concurrent`, system: 'Chorus server, over HTTP (streamed)', requests: CONCURRENT, tokensPerS: await overHttp(target, prompts, CONCURRENT, CONCURRENT) });

    // transformers.js on the same files.
    const model = await AutoModelForCausalLM.from_pretrained(c.dir, { local_files_only: true, dtype: 'fp32', device: 'cpu', model_file_name: 'decoder_model_merged' });
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
    add('batch 1', 'transformers.js generate', 1, await timeIt(() => tjs(one[0]!)));
    add(`${CONCURRENT} concurrent`, 'transformers.js generate', CONCURRENT, await timeIt(() => Promise.all(many.map(tjs))));
    add(`${CONCURRENT} concurrent`, 'transformers.js generate, padded batch', CONCURRENT, await timeIt(() => tjsBatch(many)));
    await model.dispose();
    if (c.tokenizerJson !== undefined) {
      copyFileSync(c.tokenizerJson, join(c.dir, 'tokenizer.json'));
      writeFileSync(join(c.dir, 'tokenizer_config.json'), JSON.stringify({ tokenizer_class: 'GPT2Tokenizer', model_max_length: 1024, bos_token: '<|endoftext|>', eos_token: '<|endoftext|>' }));
      const generator = (await pipeline('text-generation', c.dir, { local_files_only: true, dtype: 'fp32', device: 'cpu', model_file_name: 'decoder_model_merged' })) as TextGenerationPipeline;
      const call = (text: string) => generator(text, { max_new_tokens: NEW_TOKENS, min_new_tokens: NEW_TOKENS, do_sample: false, return_full_text: false });
      add('batch 1', 'transformers.js pipeline (text)', 1, await timeIt(() => call(prompts[0]!)));
      add(`${CONCURRENT} concurrent`, 'transformers.js pipeline (text)', CONCURRENT, await timeIt(() => Promise.all(prompts.map(call))));
      await generator.dispose();
    }
  } finally {
    server.child.kill('SIGTERM');
  }
  for (const row of rows) {
    const base = rows.find((r) => r.setting === row.setting && r.system === 'transformers.js generate');
    row.ratio = row.tokensPerS / base!.tokensPerS;
  }
  return rows;
}

mkdirSync(work, { recursive: true });
buildModel({ source: join(SHARED, 'models/stories260K/stories260K.bin'), out: join(work, 'stories260K') });
makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: join(work, 'gpt2-124m-ckpt') });
buildModel({ source: join(work, 'gpt2-124m-ckpt'), out: join(work, 'gpt2-124m') });
const rows = [
  ...(await benchModel({ name: 'stories260K', dir: join(work, 'stories260K'), vocab: 512, tokenizer: `type: llama2c\nsource: ${join(SHARED, 'models/stories260K/tok512.bin')}\n` })),
  ...(await benchModel({ name: 'GPT-2 124M (random weights)', dir: join(work, 'gpt2-124m'), vocab: 50257, tokenizer: 'type: tiktoken\nencoding: gpt2\n', tokenizerJson: join(SHARED, 'tokenizers/gpt2/tokenizer.json') })),
];

const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
console.log(line(['model', 'setting', 'system', 'tok/s', 'over transformers.js generate']));
console.log(line(['---', '---', '---', '---:', '---:']));
for (const r of rows) console.log(line([r.model, r.setting, r.system, r.tokensPerS.toFixed(0), `${r.ratio!.toFixed(2)}x`]));
const date = new Date().toISOString().slice(0, 10);
const out = join(ROOT, 'bench/results', `cpu-chorus-vs-transformersjs-${date}.json`);
writeFileSync(out, `${JSON.stringify({ cpu: cpus()[0]?.model, cores: cpus().length, node: process.version, newTokens: NEW_TOKENS, promptTokens: PROMPT, rows }, null, 2)}\n`);
const chart = await renderChart({
  $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
  title: `Generation on ${cpus().length} CPU cores: output tokens/s (${NEW_TOKENS} new tokens, greedy)`,
  background: 'white',
  data: { values: rows },
  facet: { row: { field: 'model', title: null, sort: 'descending' }, column: { field: 'setting', title: null, sort: ['batch 1', `${CONCURRENT} concurrent`] } },
  resolve: { scale: { x: 'independent', y: 'independent' } },
  spec: {
    width: 300,
    height: 150,
    mark: 'bar',
    encoding: {
      y: { field: 'system', type: 'nominal', title: null, sort: null, axis: { labelLimit: 320 } },
      x: { field: 'tokensPerS', type: 'quantitative', title: 'tokens/s' },
      color: { field: 'system', type: 'nominal', legend: null },
    },
  },
  config: { font: 'DejaVu Sans' },
} as never);
mkdirSync(join(ROOT, 'docs/img'), { recursive: true });
writeFileSync(join(ROOT, 'docs/img/cpu-chorus-vs-transformersjs.svg'), chart.svg);
writeFileSync(join(ROOT, 'docs/img/cpu-chorus-vs-transformersjs.png'), chart.png);
console.log(`\nwrote ${out} and docs/img/cpu-chorus-vs-transformersjs.{svg,png}`);
process.exit(0);
