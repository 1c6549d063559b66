/**
 * `chorus infer --ensemble <name> --input NAME=JSON ...`: runs an ensemble in process on tensors and
 * prints its outputs as JSON (with --stream, each snapshot on its own line as it comes). An input's JSON
 * is a whole tensor ({"datatype", "shape", "data"}) or just its value: a scalar, or nested lists whose
 * nesting gives the shape; the batch dimension is added when the value has one fewer than the input
 * declares, and the datatype is the input's.
 */
import type { Command } from 'commander';
import { lastValueFrom, tap } from 'rxjs';
import type { TensorSpec } from '../config/index.ts';
import { tensor, tensorFromValue, type Tensor } from '../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../errors.ts';
import { openService, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';

interface InferOptions extends RepositoryOptions {
  ensemble: string;
  input: string[];
  stream?: boolean;
}

export function registerInfer(program: Command): void {
  const command = program.command('infer');
  withRepositoryOptions(command);
  command
    .description('run an ensemble of a repository on input tensors, in process; prints the outputs as JSON')
    .requiredOption('-e, --ensemble <name>', 'the ensemble')
    .option('-i, --input <NAME=JSON>', 'an input tensor: its value or a whole tensor as JSON; repeatable', (value: string, previous: string[]) => [...previous, value], [] as string[])
    .option('--stream', 'print every snapshot of the outputs as it comes, one JSON per line')
    .action(async (options: InferOptions) => {
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

function toTensor(name: string, value: unknown, spec: TensorSpec): Tensor {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const t = value as Partial<Tensor>;
    return tensor(t.datatype ?? spec.datatype, t.shape ?? [], t.data ?? [], name);
  }
  return tensorFromValue(name, value, spec);
}
