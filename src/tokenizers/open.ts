/** Opens a tokenizer straight from a file or directory path, recognising the format. */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ChorusError } from '../errors.ts';
import { HfTokenizerAdapter, type HfTokenizerConfig, type HfTokenizerOptions } from './hf.ts';
import { Llama2cTokenizer } from './llama2c.ts';
import { SentencePieceAdapter } from './sentencepiece.ts';
import { TiktokenAdapter } from './tiktoken.ts';
import type { Tokenizer } from './tokenizer.ts';

/** File names looked for, in order, when a directory is given. */
const DIRECTORY_FILES = ['tokenizer.json', 'tokenizer.model', 'spiece.model', 'sentencepiece.bpe.model', 'tokenizer.bin'];

/**
 * Opens `path`: a `tokenizer.json` (with `tokenizer_config.json` beside it when present), a SentencePiece
 * `.model`, a llama2.c `.bin`, a `.tiktoken` rank file, or a directory holding one of them.
 */
export async function openTokenizerPath(path: string): Promise<Tokenizer> {
  if (!existsSync(path)) throw new ChorusError('CHORUS_FILE_MISSING', `tokenizer path ${path} does not exist`, { value: path });
  let file = path;
  if (statSync(path).isDirectory()) {
    const found = DIRECTORY_FILES.find((name) => existsSync(join(path, name)));
    if (found === undefined) {
      throw new ChorusError('CHORUS_FILE_MISSING', `directory ${path} holds no tokenizer file (looked for ${DIRECTORY_FILES.join(', ')})`);
    }
    file = join(path, found);
  }
  const name = basename(file);
  if (name.endsWith('.json')) return openHfTokenizerJson(file);
  if (name.endsWith('.model')) return SentencePieceAdapter.load(file);
  if (name.endsWith('.bin')) return Llama2cTokenizer.load(file);
  if (name.endsWith('.tiktoken')) return new TiktokenAdapter({ file });
  throw new ChorusError('CHORUS_UNSUPPORTED', `cannot tell the tokenizer format of ${file}: expected .json, .model, .bin or .tiktoken`);
}

/** Reads a `tokenizer.json` and the `tokenizer_config.json` beside it, when there is one. */
export function openHfTokenizerJson(file: string, options: Omit<HfTokenizerOptions, 'config'> = {}): HfTokenizerAdapter {
  const configFile = join(dirname(file), 'tokenizer_config.json');
  return new HfTokenizerAdapter(readJson(file), {
    ...options,
    config: existsSync(configFile) ? (readJson(configFile) as HfTokenizerConfig) : undefined,
  });
}

function readJson(file: string): object {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (cause) {
    throw new ChorusError('CHORUS_FILE_MISSING', `${file} cannot be read`, { cause });
  }
  try {
    return JSON.parse(text) as object;
  } catch (cause) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${file} is not valid JSON: ${(cause as Error).message}`, { cause });
  }
}
