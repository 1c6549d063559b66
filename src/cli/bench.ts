/**
 * `chorus bench`: drives a running server with real HTTP across a sweep of concurrencies or request
 * rates, prints a summary table, writes every request's timings as JSON (and, with --plot, the chart);
 * `chorus bench plot results.json...` draws throughput against latency as SVG and PNG.
 */
import { closeSync, existsSync, openSync, unlinkSync, writeFileSync } from 'node:fs';
import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { ChorusError, invalidArgument } from '../errors.ts';
import {
  countPromptTokens,
  fitWords,
  formatTable,
  loadDataset,
  parseSettings,
  plotResults,
  PROTOCOLS,
  requestsPerSetting,
  runBench,
  settingLabel,
  syntheticPrompts,
  type BenchResult,
  type Protocol,
  type Sampling,
  type Target,
} from '../bench/index.ts';

interface BenchCliOptions {
  url: string;
  pipeline?: string;
  protocol: string;
  concurrency?: string;
  requestRate?: string;
  dataset?: string;
  datasetField?: string;
  promptTokens?: string;
  outputTokens?: string;
  temperature?: string;
  topP?: string;
  requestSeed?: string;
  requests?: string;
  duration?: string;
  warmup: string;
  stream?: boolean;
  apiKey?: string;
  timeout: string;
  seed: string;
  out?: string;
  plot?: boolean;
  quiet?: boolean;
}

/** A file path the command can write: opened for appending once (and removed again if it was new). */
function writableFile(path: string, flag: string): void {
  const existed = existsSync(path);
  try {
    closeSync(openSync(path, 'a'));
    if (!existed) unlinkSync(path);
  } catch (error) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${flag} ${path} cannot be written (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, { param: flag });
  }
}

function positiveInt(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw invalidArgument(flag, 'a positive integer', value);
  return n;
}

function nonNegative(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw invalidArgument(flag, 'a number >= 0', value);
  return n;
}

/** The prompts of the run: the dataset's (cut to about --prompt-tokens when given) or synthetic ones. */
async function preparePrompts(options: BenchCliOptions, target: Target): Promise<{ prompts: string[]; source: string; targetTokens?: number; measuredTokens?: number }> {
  const promptTokens = positiveInt('--prompt-tokens', options.promptTokens);
  // The server's count of a text's tokens. Its failure ends the run early.
  const measure = (text: string): Promise<number | undefined> => countPromptTokens(target, text);
  if (options.dataset === undefined) {
    const tokens = promptTokens ?? 64;
    const { prompts, measured } = await syntheticPrompts(tokens, 64, measure);
    return { prompts, source: 'synthetic', targetTokens: tokens, measuredTokens: measured };
  }
  let prompts = loadDataset(options.dataset, options.datasetField);
  if (promptTokens === undefined) return { prompts, source: options.dataset, measuredTokens: await measure(prompts[0]!) };
  // The words per token of the first prompt, by the server's count; each prompt cut to as many words.
  const fit = await fitWords(prompts[0]!.split(/\s+/), promptTokens, measure);
  prompts = prompts.map((p) => p.split(/\s+/).slice(0, fit.words).join(' '));
  const measured = fit.measured;
  return { prompts, source: options.dataset, targetTokens: promptTokens, measuredTokens: measured };
}

export function registerBench(program: Command): void {
  const bench = program
    .command('bench')
    .description('load a running server and measure it: requests/s, output tokens/s, time to first token, inter-token latency, errors')
    .option('--url <url>', 'the server', 'http://127.0.0.1:8000')
    .option('--pipeline <name>', 'the pipeline to load (required)')
    .option('--protocol <protocol>', `${PROTOCOLS.join(' | ')}`, 'openai')
    .option('--concurrency <list>', 'clients sending back to back, per setting: e.g. 1,8,32 (default 1)')
    .option('--request-rate <list>', 'requests per second, per setting (Poisson arrivals): e.g. 5,10,inf')
    .option('--dataset <file>', 'prompts: JSON lines (a text field per record) or a text file (one per line)')
    .option('--dataset-field <field>', 'the JSON lines field holding the prompt (default: prompt, text, article, ...)')
    .option('--prompt-tokens <n>', 'synthetic prompts of n tokens (default 64); with --dataset, cut prompts to about n tokens')
    .option('--output-tokens <n>', 'ask for exactly n output tokens (max_tokens = min_tokens = n)')
    .option('--temperature <t>', 'sampling temperature sent with each request (default: the pipeline\'s)')
    .option('--top-p <p>', 'nucleus sampling: top_p in (0, 1] sent with each request (default: the pipeline\'s)')
    .option('--request-seed <n>', 'each request samples with its own seed: n, n+1, ... (default: none sent)')
    .option('--requests <n>', 'requests per setting (default 32, or unlimited with --duration)')
    .option('--duration <seconds>', 'per setting, start requests for this long')
    .option('--warmup <n>', 'requests sent before measuring, not counted (as many at once as the highest --concurrency)', '1')
    .option('--stream', 'stream answers (not with kserve): time to first token and inter-token latency')
    .option('--api-key <key>', 'sent as Authorization: Bearer <key> (default: $CHORUS_API_KEY)')
    .option('--timeout <seconds>', 'per-request limit', '600')
    .option('--seed <n>', 'seed of the request-rate arrival times', '0')
    .option('--out <file>', 'results JSON (default: chorus-bench-<pipeline>-<time>.json)')
    .option('--plot', 'also draw the chart next to the JSON (.svg and .png)')
    .option('--quiet', 'no progress bar')
    .enablePositionalOptions()
    .action(async (options: BenchCliOptions) => {
      if (options.pipeline === undefined) throw invalidArgument('--pipeline', 'the name of a pipeline on the server', undefined);
      // Where the results go is checked before the run, which could take minutes to lose.
      if (options.out !== undefined) writableFile(options.out, '--out');
      if (!PROTOCOLS.includes(options.protocol as Protocol)) throw invalidArgument('--protocol', PROTOCOLS.join(', '), options.protocol);
      const protocol = options.protocol as Protocol;
      if (options.stream && protocol === 'kserve') throw invalidArgument('--stream', 'used with --protocol openai or generate (KServe infer answers whole)', true);
      try {
        new URL(options.url);
      } catch {
        throw invalidArgument('--url', 'an http(s) URL such as http://127.0.0.1:8000', options.url);
      }
      const settings = parseSettings(options.concurrency, options.requestRate);
      const requests = positiveInt('--requests', options.requests);
      const durationS = nonNegative('--duration', options.duration);
      const warmup = nonNegative('--warmup', options.warmup)!;
      const timeoutS = nonNegative('--timeout', options.timeout)!;
      if (timeoutS === 0) throw invalidArgument('--timeout', 'a number of seconds > 0', options.timeout);
      const outputTokens = positiveInt('--output-tokens', options.outputTokens);
      const temperature = nonNegative('--temperature', options.temperature);
      const topP = options.topP === undefined ? undefined : Number(options.topP);
      if (topP !== undefined && !(topP > 0 && topP <= 1)) throw invalidArgument('--top-p', 'a number in (0, 1]', options.topP);
      const requestSeed = options.requestSeed === undefined ? undefined : Number(options.requestSeed);
      if (requestSeed !== undefined && (!Number.isInteger(requestSeed) || requestSeed < 0)) throw invalidArgument('--request-seed', 'an integer >= 0', options.requestSeed);
      const seed = Number(options.seed);
      if (!Number.isInteger(seed)) throw invalidArgument('--seed', 'an integer', options.seed);
      const target: Target = { url: options.url, pipeline: options.pipeline, protocol, stream: options.stream === true, apiKey: options.apiKey ?? process.env.CHORUS_API_KEY, timeoutS };
      const sampling: Sampling = { ...(outputTokens === undefined ? {} : { max_tokens: outputTokens, min_tokens: outputTokens }), ...(temperature === undefined ? {} : { temperature }), ...(topP === undefined ? {} : { top_p: topP }) };
      const prompts = await preparePrompts(options, target);
      const progress = options.quiet || !process.stderr.isTTY ? undefined : new cliProgress.SingleBar({ format: '{setting} [{bar}] {value}/{total} requests, {errors} errors', stream: process.stderr, hideCursor: true }, cliProgress.Presets.shades_classic);
      let errors = 0;
      const settingResults = await runBench({
        target,
        sampling,
        prompts: prompts.prompts,
        settings,
        requests,
        durationS,
        warmup,
        seed,
        requestSeed,
        onSetting: (setting, total) => {
          progress?.stop();
          errors = 0;
          progress?.start(total ?? 0, 0, { setting: settingLabel(setting).padEnd(16), errors });
        },
        onRecord: (_setting, record) => {
          if (!record.ok) errors++;
          if (requests === undefined) progress?.setTotal(record.index + 1);
          progress?.increment(1, { errors });
        },
      });
      progress?.stop();
      const result: BenchResult = {
        tool: 'chorus bench',
        createdAt: new Date().toISOString(),
        target: { url: target.url, pipeline: target.pipeline, protocol: target.protocol, stream: target.stream, timeoutS: target.timeoutS },
        sampling,
        ...(requestSeed === undefined ? {} : { requestSeed }),
        prompts: { count: prompts.prompts.length, source: prompts.source, targetTokens: prompts.targetTokens, measuredTokens: prompts.measuredTokens },
        requestsPerSetting: requestsPerSetting(requests, durationS),
        durationS,
        warmup,
        settings: settingResults,
      };
      const out = options.out ?? `chorus-bench-${options.pipeline}-${result.createdAt.replace(/[:.]/g, '-')}.json`;
      writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
      process.stdout.write(`${options.pipeline} over ${protocol}${target.stream ? ' (streamed)' : ''} at ${options.url}; percentiles in ms are p50 / p90 / p99\n`);
      process.stdout.write(`${formatTable(settingResults.map((s) => s.summary))}\n`);
      const firstError = settingResults.flatMap((s) => s.requests).find((r) => !r.ok);
      if (firstError !== undefined) process.stdout.write(`first error: ${firstError.error}\n`);
      process.stderr.write(`chorus: wrote ${out}\n`);
      if (options.plot) await writeChart([{ path: out }], out.replace(/\.json$/i, ''), undefined);
    });

  bench
    .command('plot <results...>')
    .description('chart throughput against latency from chorus bench results (one line per file), as SVG and PNG')
    .option('--out <file>', 'the chart, without or with .svg (default: the first results file, .svg and .png)')
    .option('--title <title>', 'the chart\'s title')
    .option('--label <labels>', 'comma-separated series names, one per results file')
    .action(async (results: string[], options: { out?: string; title?: string; label?: string }) => {
      const labels = options.label?.split(',');
      if (labels !== undefined && labels.length !== results.length) throw invalidArgument('--label', `${results.length} comma-separated names (one per results file)`, options.label);
      await writeChart(results.map((path, i) => ({ path, label: labels?.[i] })), (options.out ?? results[0]!).replace(/\.(json|svg|png)$/i, ''), options.title);
    });
}

async function writeChart(files: Array<{ path: string; label?: string }>, stem: string, title: string | undefined): Promise<void> {
  const { svg, png } = await plotResults(files, title);
  writeFileSync(`${stem}.svg`, svg);
  writeFileSync(`${stem}.png`, png);
  process.stderr.write(`chorus: wrote ${stem}.svg and ${stem}.png\n`);
}
