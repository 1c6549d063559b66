/** Turns a tokenizer definition into a working `Tokenizer`. */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { Llama2cTokenizer, openHfTokenizerJson, SentencePieceAdapter, TiktokenAdapter, type Tokenizer } from '../tokenizers/index.ts';
import type { TokenizerDefinition } from '../config/schemas.ts';
import { tokenizerFileCandidates } from './tokenizer-files.ts';
import { describeSource, isRemote } from './fetch-source.ts';
import { resolveSource } from './source.ts';

/** Opens the tokenizer that `definition` (named `name`, in the repository at `repositoryDir`) describes. */
export async function openTokenizerDefinition(name: string, definition: TokenizerDefinition, repositoryDir: string): Promise<Tokenizer> {
  const chatTemplate = definition.chat_template;
  const file = definition.source === undefined ? undefined : locateFile(name, definition, definition.source, repositoryDir);
  switch (definition.type) {
    case 'tiktoken':
      return new TiktokenAdapter({ encoding: definition.encoding, file, pattern: definition.pattern, chatTemplate });
    case 'huggingface':
      return openHfTokenizerJson(required(name, file), { chatTemplate, specialTokens: definition.special_tokens });
    case 'sentencepiece':
      return SentencePieceAdapter.load(required(name, file), { addBos: definition.add_bos, addEos: definition.add_eos, chatTemplate });
    case 'llama2c':
      return Llama2cTokenizer.load(required(name, file), { addBos: definition.add_bos, addEos: definition.add_eos, chatTemplate });
  }
}

function required(name: string, file: string | undefined): string {
  if (file === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `tokenizer ${name} needs source`, { param: 'source' });
  return file;
}

/** The tokenizer file: `source` itself when it is a file, else the first candidate inside it. */
function locateFile(name: string, definition: TokenizerDefinition, source: string, repositoryDir: string): string {
  const resolved = resolveSource(source, repositoryDir);
  if (resolved === undefined) {
    throw new ChorusError('CHORUS_CONFIG_INVALID', `tokenizer ${name}: source must be a path, hf:<org>/<name>[@<revision>] or s3://<bucket>/<prefix>, got "${source}"`, {
      param: 'source',
      value: source,
    });
  }
  if (!existsSync(resolved.path)) {
    if (isRemote(resolved)) {
      throw new ChorusError(
        'CHORUS_SOURCE_UNAVAILABLE',
        `tokenizer ${name}: ${describeSource(resolved)} is not in the cache (${resolved.path}); place its files there or point source at a local path`,
        { param: 'source', value: source },
      );
    }
    throw new ChorusError('CHORUS_FILE_MISSING', `tokenizer ${name}: source path ${resolved.path} does not exist`, { param: 'source', value: source });
  }
  if (!statSync(resolved.path).isDirectory()) return resolved.path;
  const candidates = tokenizerFileCandidates(definition);
  const found = candidates.map((candidate) => join(resolved.path, candidate)).find((path) => existsSync(path));
  if (found === undefined) {
    throw new ChorusError('CHORUS_FILE_MISSING', `tokenizer ${name}: ${resolved.path} holds no ${candidates.join(' or ')}`, { param: 'file' });
  }
  return found;
}
