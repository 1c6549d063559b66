/** `chorus generate`: the engine in process, on a built model or a checkpoint built on the fly. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { ChorusError, invalidArgument, renamed } from '../errors.ts';
import { OrtEngine, Seq2SeqEngine, type Engine, type SamplingParams } from '../generation/index.ts';
import type { TextRequest } from '../pipeline/index.ts';
import { builtModelDirectory, tensorParallelBuild } from '../repository/index.ts';
import { openTokenizerPath, StreamDecoder, type Tokenizer } from '../tokenizers/index.ts';
import { openService, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';
import { resolveTokenizer } from './tokenize.ts';

interface GenerateOptions extends RepositoryOptions {
  model?: string;
  pipeline?: string;
  tokenizer?: string;
  maxTokens?: string;
  temperature?: string;
  topK?: string;
  topP?: string;
  seed?: string;
  beamWidth?: string;
  numReturn?: string;
  lenPenalty?: string;
  stream?: boolean;
  ids?: boolean;
}

export function registerGenerate(program: Command): void {
  const command = program.command('generate');
  withRepositoryOptions(command);
  command
    .description('generate a continuation of a prompt, in process: with a model, or through a pipeline of a repository')
    .option('-m, --model <path>', 'a built model directory, a checkpoint directory, or a llama2.c .bin (built on the fly and cached)')
    .option('-p, --pipeline <name>', 'a pipeline of the repository (instead of --model)')
    .option('-t, --tokenizer <name|path>', 'with --model: the tokenizer (default: the one in the model directory)')
    .option('--max-tokens <n>', 'tokens to generate at most (default: 64, or the pipeline\'s)')
    .option('--temperature <t>', '0 decodes greedily (default: 1)')
    .option('--top-k <k>', 'keep the k most likely tokens (0: off)')
    .option('--top-p <p>', 'nucleus sampling threshold, in (0, 1]')
    .option('--seed <n>', 'the random seed')
    .option('--beam-width <n>', 'beams (1: sampling or greedy)')
    .option('--num-return <n>', 'with beams: the best n sequences, one per line (default: 1)')
    .option('--len-penalty <x>', 'with beams: scores are log-prob / length^x (default: 1)')
    .option('--stream', 'print text as it is generated')
    .option('--ids', 'print token ids instead of text')
    .argument('<prompt>', 'the prompt text ("" for none)')
    .action(async (prompt: string, options: GenerateOptions) => {
      try {
        await generate(prompt, options);
      } catch (error) {
        throw asFlags(error);
      }
    });
}

/** The numeric flags: each flag, its option, the engine parameter it sets, and the pipeline field it sets. */
const NUMERIC_FLAGS: Array<[flag: string, option: keyof GenerateOptions, param: keyof SamplingParams, field: string]> = [
  ['--max-tokens', 'maxTokens', 'request_output_len', 'max_tokens'],
  ['--temperature', 'temperature', 'temperature', 'temperature'],
  ['--top-k', 'topK', 'runtime_top_k', 'top_k'],
  ['--top-p', 'topP', 'runtime_top_p', 'top_p'],
  ['--seed', 'seed', 'random_seed', 'seed'],
  ['--beam-width', 'beamWidth', 'beam_width', 'beam_width'],
  ['--num-return', 'numReturn', 'num_return_sequences', 'n'],
  ['--len-penalty', 'lenPenalty', 'len_penalty', 'len_penalty'],
];

/** The flag each engine parameter and pipeline field comes from. */
const FLAGS: Record<string, string> = Object.fromEntries(NUMERIC_FLAGS.flatMap(([flag, , param, field]) => [[param, flag], [field, flag]]));

/** An error about an engine parameter or pipeline field, said of the flag that set it. */
function asFlags(error: unknown): unknown {
  if (!(error instanceof ChorusError) || error.param === undefined) return error;
  const flag = FLAGS[error.param];
  return flag === undefined ? error : renamed(error, error.param, flag);
}

async function generate(prompt: string, options: GenerateOptions): Promise<void> {
  if ((options.model === undefined) === (options.pipeline === undefined)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', 'give --model <path> or --pipeline <name>, one of them', { param: '--model' });
  if (options.pipeline !== undefined) {
    await generateWithPipeline(options.pipeline, prompt, options);
    return;
  }
  const dir = await modelDirectory(options.model!);
  const tokenizer = options.tokenizer !== undefined ? await resolveTokenizer(options.tokenizer, undefined) : await openTokenizerPath(dir);
  const params = samplingParams(options);
  const inputIds = tokenizer.encode(prompt);
  const seq2seq = existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
  const engine: Engine = seq2seq ? await Seq2SeqEngine.open(dir) : await OrtEngine.open(dir);
  try {
    // A decoder-only model continues the prompt, which is context for the text's first piece.
    await printGeneration(engine, tokenizer, inputIds, params, options, seq2seq ? [] : inputIds);
  } finally {
    await engine.close();
  }
}

/** The numeric flags given: each flag's value, the engine parameter it sets, and the pipeline field it sets. */
function numericFlags(options: GenerateOptions): Array<{ param: keyof SamplingParams; field: string; value: number }> {
  return NUMERIC_FLAGS.flatMap(([flag, option, param, field]) => {
    const value = options[option] as string | undefined;
    if (value === undefined) return [];
    const parsed = Number(value);
    if (value.trim() === '' || !Number.isFinite(parsed)) throw invalidArgument(flag, 'a number', value);
    return [{ param, field, value: parsed }];
  });
}

function samplingParams(options: GenerateOptions): SamplingParams {
  const params: SamplingParams = {};
  for (const { param, value } of numericFlags({ ...options, maxTokens: options.maxTokens ?? '64' })) Object.assign(params, { [param]: value });
  return params;
}

async function printGeneration(engine: Engine, tokenizer: Tokenizer, inputIds: number[], params: SamplingParams, options: GenerateOptions, context: number[]): Promise<void> {
  // One pass over the tokens: ids or text, written as they come with --stream, else all at the end.
  // Beam search's sequences come one after another: each on its own line.
  let decoder = new StreamDecoder(tokenizer, { skipSpecialTokens: true, context });
  const pieces: string[] = [];
  const emit = (piece: string): void => {
    if (options.stream) process.stdout.write(piece);
    else pieces.push(piece);
  };
  let count = 0;
  let sequence = 0;
  const endLine = (): void => {
    if (!options.ids) emit(decoder.flush());
    emit('\n');
  };
  await new Promise<void>((resolvePromise, reject) => {
    engine.submit({ inputIds, params }).subscribe({
      next: (event) => {
        if ((event.sequence ?? 0) !== sequence) {
          endLine();
          sequence = event.sequence ?? 0;
          decoder = new StreamDecoder(tokenizer, { skipSpecialTokens: true, context });
          count = 0;
        }
        emit(options.ids ? `${count++ > 0 ? ' ' : ''}${event.token}` : decoder.push(event.token));
      },
      error: reject,
      complete: resolvePromise,
    });
  });
  endLine();
  if (!options.stream) process.stdout.write(pieces.join(''));
}

/** A built model directory for `path`: itself when built, else a build cached by the source's identity. */
async function modelDirectory(path: string): Promise<string> {
  const dir = await builtModelDirectory(path, {}, (line) => process.stderr.write(`${line}\n`), '--model');
  const split = tensorParallelBuild(dir);
  if (split !== undefined) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${path} is built split over ${split} GPUs (tensor_parallel ${split}): generate through a pipeline whose model definition has tensor_parallel: ${split}`, { param: 'model' });
  }
  if (!existsSync(join(dir, 'onnx', 'decoder_model_merged.onnx'))) throw new ChorusError('CHORUS_UNSUPPORTED', `${path} holds an encoder alone (built with task encode): nothing to generate with`, { param: 'model' });
  return dir;
}

/** Through a pipeline: the flags become its request fields (those not given keep the pipeline's defaults). */
async function generateWithPipeline(name: string, prompt: string, options: GenerateOptions): Promise<void> {
  if (options.ids) throw new ChorusError('CHORUS_INVALID_ARGUMENT', '--ids needs --model: a pipeline answers text', { param: '--ids' });
  if (options.tokenizer !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', '--tokenizer needs --model: a pipeline names its own', { param: '--tokenizer' });
  const service = openService(options);
  try {
    const request: TextRequest = { text_input: prompt };
    for (const { field, value } of numericFlags(options)) request[field] = value;
    const texts: string[] = [];
    let shown = 0;
    await new Promise<void>((resolvePromise, reject) => {
      service.pipeline(name).run(request).subscribe({
        next: (update) => {
          for (const choice of update.choices) {
            texts[choice.index] = choice.text;
            if (options.stream && choice.index === 0) {
              process.stdout.write(choice.delta);
              shown = choice.text.length;
            }
          }
        },
        error: reject,
        complete: resolvePromise,
      });
    });
    if (options.stream) process.stdout.write(`${(texts[0] ?? '').slice(shown)}\n${texts.slice(1).map((t) => `${t}\n`).join('')}`);
    else process.stdout.write(texts.map((t) => `${t}\n`).join('') || '\n');
  } finally {
    await service.close();
  }
}
