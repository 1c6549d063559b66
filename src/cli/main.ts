/** The `chorus` command line. */
import { Command, CommanderError } from 'commander';
import { ChorusError } from '../errors.ts';
import { VERSION } from '../version.ts';
import { registerBench } from './bench.ts';
import { registerBuild } from './build.ts';
import { registerClient } from './client.ts';
import { registerExport } from './export.ts';
import { registerGenerate } from './generate.ts';
import { registerInfer } from './infer.ts';
import { registerServe } from './serve.ts';
import { registerSetup } from './setup.ts';
import { registerTokenize } from './tokenize.ts';
import { registerValidate } from './validate.ts';

/** Builds the program; `run` parses `argv` with it. Exported for tests. */
export function buildProgram(): Command {
  const program = new Command('chorus')
    .description('Ensemble inference pipelines for transformer text models')
    .version(VERSION, '-V, --version', 'print the version')
    .showHelpAfterError()
    .enablePositionalOptions()
    .exitOverride();
  registerValidate(program);
  registerTokenize(program);
  registerBuild(program);
  registerGenerate(program);
  registerInfer(program);
  registerServe(program);
  registerSetup(program);
  registerBench(program);
  registerClient(program);
  registerExport(program);
  return program;
}

/** Runs the CLI; resolves to the exit code. */
export async function run(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return process.exitCode === undefined ? 0 : Number(process.exitCode);
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode;
    if (error instanceof ChorusError) {
      process.stderr.write(`chorus: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
}

if (import.meta.url === `file://${process.argv[1]}` || process.env.CHORUS_CLI_MAIN === '1') {
  process.exitCode = await run(process.argv.slice(2));
}
