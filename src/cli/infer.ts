/**
 * `chorus infer --ensemble <name> --input NAME=JSON ...`: runs an ensemble in process on tensors and
 * prints its outputs as JSON (with --stream, each snapshot on its own line as it comes). An input's JSON
 * is a whole tensor ({"datatype", "shape", "data"}) or just its value: a scalar, or nested lists whose
 * nesting gives the shape; the batch dimension is added when the value has one fewer than the input
 * declares, and the datatype is the input's.
 *
 * `chorus infer --request <file> [--url URL] [--model NAME]`: sends a request file (KServe v2 JSON, or
 * FT's `sample_request_single_t5.json` shape) to a server's KServe infer, or runs it in process without
 * --url, and prints each output as FT's issue_request.py does (`name:` then the numpy array).
 */
import type { Command } from 'commander';
import { lastValueFrom, tap } from 'rxjs';
import type { TensorSpec } from '../config/index.ts';
import { tensor, tensorFromValue, type Tensor } from '../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../errors.ts';
import { inferRemote } from './remote.ts';
import { openService, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';
import { formatOutput, readRequestFile } from './request-file.ts';

interface InferOptions extends RepositoryOptions {
  ensemble?: string;
  input: string[];
  stream?: boolean;
  request?: string;
  url?: string;
  model?: string;
  apiKey?: string;
}

export function registerInfer(program: Command): void {
  const command = program.command('infer');
  withRepositoryOptions(command);
  command
    .description('run an ensemble on input tensors (in process, or a request file against a server); prints the outputs')
    .option('-e, --ensemble <name>', 'the ensemble')
    .option('-i, --input <NAME=JSON>', 'an input tensor: its value or a whole tensor as JSON; repeatable', (value: string, previous: string[]) => [...previous, value], [] as string[])
    .option('--stream', 'print every snapshot of the outputs as it comes, one JSON per line')
    .option('--request <file>', 'a KServe v2 JSON request file (or FT\'s {"request": [{name, data, dtype}]}); prints the outputs as FT\'s client does')
    .option('--url <url>', 'with --request: the server (http://host:8000) to send it to; default: the file\'s config.url, else run it in process')
    .option('-m, --model <name>', 'with --request: the model (ensemble) to run; default: the file\'s model_name, else fastertransformer')
    .option('--api-key <key>', 'with --url: sent as Authorization: Bearer <key>')
    .action(async (options: InferOptions) => {
      if (options.request !== undefined) {
        await inferRequestFile(options);
        return;
      }
      if (options.ensemble === undefined) throw invalidArgument('--ensemble', 'the ensemble to run (or give --request <file>)', undefined);
      for (const [flag, value] of [['--url', options.url], ['--api-key', options.apiKey], ['--model', options.model]] as const) {
        if (value !== undefined) throw invalidArgument(flag, 'given with --request (--ensemble runs in process)', value);
      }
      const service = openService(options);
      try {
        const ensemble = service.ensemble(options.ensemble);
        const inputs: Record<string, Tensor> = {};
        for (const text of options.input) {
          const at = text.indexOf('=');
          if (at <= 0) throw invalidArgument('--input', 'NAME=JSON', text);
          const name = text.slice(0, at);
          const spec = ensemble.definition.inputs[name];
          if (spec === undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `ensemble ${options.ensemble} has no input ${name}; its inputs are: ${Object.keys(ensemble.definition.inputs).join(', ')}`, { param: '--input' });
          let value: unknown;
          try {
            value = JSON.parse(text.slice(at + 1));
          } catch {
            throw invalidArgument(`--input ${name}`, 'JSON (a string needs quotes: \'"text"\')', text.slice(at + 1));
          }
          inputs[name] = toTensor(name, value, spec);
        }
        const final = await lastValueFrom(ensemble.run(inputs).pipe(tap((snapshot) => options.stream && process.stdout.write(`${JSON.stringify(snapshot)}\n`))));
        if (!options.stream) process.stdout.write(`${JSON.stringify(final, null, 2)}\n`);
      } finally {
        await service.close();
      }
    });
}

/** `--request`: the file's tensors to the server (or in process), the outputs printed as FT's client prints them. */
async function inferRequestFile(options: InferOptions): Promise<void> {
  if (options.input.length > 0 || options.stream === true) throw invalidArgument('--request', 'given without --input and --stream (the file holds the inputs)', options.request);
  const file = readRequestFile(options.request!);
  const model = options.model ?? options.ensemble ?? file.model ?? 'fastertransformer';
  let outputs: Record<string, Tensor>;
  const url = options.url ?? file.url;
  if (url !== undefined) {
    outputs = await inferRemote({ url, ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }) }, model, file.inputs, file.outputs);
  } else {
    const service = openService(options);
    try {
      const ensemble = service.ensemble(model);
      const all = await lastValueFrom(ensemble.run(file.inputs, { stream: false }));
      const names = file.outputs ?? Object.keys(ensemble.definition.outputs).filter((name) => name in all);
      outputs = Object.fromEntries(
        names.map((name) => {
          if (all[name] === undefined) throw invalidArgument('outputs', `names of outputs of ${model} (${Object.keys(all).join(', ')})`, name);
          return [name, all[name]];
        }),
      );
    } finally {
      await service.close();
    }
  }
  for (const [name, t] of Object.entries(outputs)) process.stdout.write(formatOutput(name, t));
}

function toTensor(name: string, value: unknown, spec: TensorSpec): Tensor {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const t = value as Partial<Tensor>;
    return tensor(t.datatype ?? spec.datatype, t.shape ?? [], t.data ?? [], name);
  }
  return tensorFromValue(name, value, spec);
}
