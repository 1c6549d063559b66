/** The options every command that opens a repository shares: --repository and --set-source. */
import { Option, type Command } from 'commander';
import { Service } from '../pipeline/index.ts';
import { bundledRepositoryDir, parseSourceOverride, type SourceOverride } from '../repository/index.ts';

export interface RepositoryOptions {
  repository?: string;
  setSource: string[];
}

/** Adds --repository and the repeatable --set-source to `command`. */
export function withRepositoryOptions(command: Command, repository = true): Command {
  if (repository) command.addOption(new Option('-r, --repository <dir>', 'the repository (default: the bundled one)').env('CHORUS_REPOSITORY'));
  return command.option(
    '--set-source <[kind:]name=source>',
    'point a model or tokenizer definition at another source (a path or hf:<org>/<name>); repeatable',
    (value: string, previous: string[]) => [...previous, value],
    [] as string[],
  );
}

export function sourceOverrides(options: RepositoryOptions): SourceOverride[] {
  return options.setSource.map(parseSourceOverride);
}

/** The repository, validated, with overrides applied. */
export function openService(options: RepositoryOptions): Service {
  return Service.open(options.repository ?? bundledRepositoryDir(), { sourceOverrides: sourceOverrides(options) });
}
