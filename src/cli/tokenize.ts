/** `chorus tokenize` and `chorus detokenize`. */
import { existsSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { ChorusError, invalidArgument } from '../errors.ts';
import { bundledRepositoryDir, loadRepository, openTokenizerDefinition } from '../repository/index.ts';
import { openTokenizerPath, type Tokenizer } from '../tokenizers/index.ts';

const tokenizerOption = new Option('-t, --tokenizer <name|path>', 'a tokenizer of the repository, or a tokenizer file or directory').makeOptionMandatory();
const repositoryOption = new Option('-r, --repository <dir>', 'the repository that names tokenizers (default: the bundled one)');

export function registerTokenize(program: Command): void {
  program
    .command('tokenize')
    .description('print the token ids of a text')
    .addOption(tokenizerOption)
    .addOption(repositoryOption)
    .option('--ids', 'print only the ids, space-separated')
    .option('--no-special', 'do not add special tokens (BOS, EOS)')
    .argument('<text>', 'the text to tokenize')
    .action(async (text: string, options: { tokenizer: string; repository?: string; ids?: boolean; special: boolean }) => {
      const tokenizer = await resolveTokenizer(options.tokenizer, options.repository);
      const ids = tokenizer.encode(text, { addSpecialTokens: options.special });
      if (options.ids) {
        process.stdout.write(`${ids.join(' ')}\n`);
        return;
      }
      for (const id of ids) process.stdout.write(`${id}\t${JSON.stringify(tokenizer.decode([id]))}\n`);
    });

  program
    .command('detokenize')
    .description('print the text of token ids')
    .addOption(tokenizerOption)
    .addOption(repositoryOption)
    .option('--skip-special', 'leave special tokens out of the text')
    .argument('<ids...>', 'token ids')
    .action(async (ids: string[], options: { tokenizer: string; repository?: string; skipSpecial?: boolean }) => {
      const tokenizer = await resolveTokenizer(options.tokenizer, options.repository);
      const parsed = ids.map((text, index) => {
        const id = Number(text);
        if (!/^\d+$/.test(text) || !Number.isSafeInteger(id)) throw invalidArgument(`ids[${index}]`, 'a non-negative integer', text);
        return id;
      });
      process.stdout.write(`${tokenizer.decode(parsed, { skipSpecialTokens: options.skipSpecial ?? false })}\n`);
    });
}

/** A repository tokenizer by name, else a file or directory path. */
export async function resolveTokenizer(nameOrPath: string, repositoryDir: string | undefined): Promise<Tokenizer> {
  const root = repositoryDir ?? bundledRepositoryDir();
  const { repository, diagnostics } = loadRepository(root);
  const definition = repository.tokenizers.get(nameOrPath);
  if (definition !== undefined) return openTokenizerDefinition(nameOrPath, definition.value, repository.dir);
  if (repository.broken.tokenizer.has(nameOrPath)) {
    const problems = diagnostics.filter((d) => d.severity === 'error' && d.file.includes(`tokenizers/${nameOrPath}.`));
    throw new ChorusError('CHORUS_CONFIG_INVALID', `tokenizer ${nameOrPath} is invalid:\n${problems.map((d) => `  ${d.file}:${d.line}:${d.column}: ${d.message}`).join('\n')}`);
  }
  if (existsSync(nameOrPath)) return openTokenizerPath(nameOrPath);
  const known = [...repository.tokenizers.keys()].join(', ') || 'none';
  throw new ChorusError('CHORUS_NOT_FOUND', `--tokenizer ${nameOrPath} is neither a tokenizer of ${repository.dir} (${known}) nor an existing path`, {
    param: 'tokenizer',
    value: nameOrPath,
  });
}
