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
    .showHelpAfterError('(add --help for usage)')
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
    // What the system refused (a path, a port, a full disk) is the user's to fix: one line, as
    // ChorusErrors are. Anything else is a fault: one line too, with the stack under CHORUS_DEBUG=1.
    const errno = (error as NodeJS.ErrnoException | undefined)?.code;
    const message = error instanceof Error ? error.message : String(error);
    if (typeof errno === 'string' && /^E[A-Z]+$/.test(errno)) {
      process.stderr.write(`chorus: ${message}\n`);
      return 1;
    }
    if (process.env.CHORUS_DEBUG === '1') throw error;
    process.stderr.write(`chorus: internal error: ${message} (CHORUS_DEBUG=1 shows where)\n`);
    return 1;
  }
}

if (import.meta.url === `file://${process.argv[1]}` || process.env.CHORUS_CLI_MAIN === '1') {
  process.exitCode = await run(process.argv.slice(2));
}
