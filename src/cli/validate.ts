/** `chorus validate [dir]`: every problem of a repository at once, at its file:line:column. */
import { relative } from 'node:path';
import type { Command } from 'commander';
import { formatDiagnostic } from '../config/index.ts';
import { bundledRepositoryDir, loadRepository } from '../repository/index.ts';
import { sourceOverrides, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';

export function registerValidate(program: Command): void {
  const command = program.command('validate');
  withRepositoryOptions(command, false);
  command
    .description('check a repository\'s definitions and report every problem with file:line:column')
    .argument('[dir]', 'the repository directory (default: the bundled repository)')
    .option('--json', 'print the diagnostics as JSON')
    .action((dir: string | undefined, options: { json?: boolean } & RepositoryOptions) => {
      const root = dir ?? bundledRepositoryDir();
      const { repository, diagnostics } = loadRepository(root, { sourceOverrides: sourceOverrides(options) });
      const errors = diagnostics.filter((d) => d.severity === 'error').length;
      const warnings = diagnostics.length - errors;
      if (options.json) {
        process.stdout.write(`${JSON.stringify({ errors, warnings, diagnostics }, null, 2)}\n`);
      } else {
        for (const diagnostic of diagnostics) process.stdout.write(`${formatDiagnostic(diagnostic)}\n`);
        const counts = (['tokenizers', 'models', 'ensembles', 'pipelines'] as const)
          .map((kind) => {
            const names = [...repository[kind].keys()];
            return `${names.length} ${kind}${names.length > 0 ? ` (${names.join(', ')})` : ''}`;
          })
          .join(', ');
        const where = relative(process.cwd(), repository.dir) || '.';
        process.stdout.write(`repository ${where}: ${counts}; ${plural(errors, 'error')}, ${plural(warnings, 'warning')}\n`);
      }
      process.exitCode = errors > 0 ? 1 : 0;
    });
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
