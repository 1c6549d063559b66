/**
 * The tokenizer a GGUF file carries, read from the files a checkpoint comes with: SentencePiece pieces
 * with scores and types (`tokenizer.model`, or llama2.c's `tokenizer.bin`), as llama.cpp's `llama`
 * tokenizer; or a byte-level BPE's tokens and merges (`tokenizer.json`, or `vocab.json` + `merges.txt`),
 * as its `gpt2` tokenizer.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ChorusError, describe } from '../../errors.ts';
import { readSentencePieceModel } from '../../tokenizers/index.ts';
import type { GgufValue } from './container.ts';

/** llama.cpp's token types (SentencePiece's piece types). */
const TokenType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

/** A vocabulary as llama.cpp reads it. */
export interface GgufVocab {
  /** The file it was read from. */
  source: string;
  model: 'llama' | 'gpt2';
  tokens: string[];
  types: number[];
  /** SentencePiece merge scores (the `llama` model). */
  scores?: number[];
  /** BPE merges, `left right` (the `gpt2` model). */
  merges?: string[];
  bos?: number;
  eos?: number;
  unk?: number;
  pad?: number;
}

/** Reads the vocabulary of `file`, by its kind: `.bin` (llama2.c), `.model` (SentencePiece), `tokenizer.json` or `vocab.json`. */
export function readVocab(file: string, specialIds: { bos?: number; eos?: number }): GgufVocab {
  if (!existsSync(file)) throw new ChorusError('CHORUS_FILE_MISSING', `tokenizer ${file} does not exist`, { param: 'tokenizer' });
  if (file.endsWith('.bin')) return llama2cVocab(file);
  if (file.endsWith('.model')) return sentencePieceVocab(file);
  if (basename(file) === 'vocab.json') return bpeVocab(file, JSON.parse(readFileSync(file, 'utf8')) as Record<string, number>, mergesTxt(join(dirname(file), 'merges.txt')), [], specialIds);
  if (file.endsWith('.json')) return tokenizerJsonVocab(file, specialIds);
  throw new ChorusError('CHORUS_UNSUPPORTED', `tokenizer ${file}: expected a llama2.c .bin, a SentencePiece .model, a tokenizer.json or a vocab.json`, { param: 'tokenizer' });
}

/** The tokenizer file that goes with a checkpoint: llama2.c's beside a `.bin`, else tokenizer.model, tokenizer.json, vocab.json in the directory. */
export function findTokenizer(source: string): string {
  if (statSync(source).isFile()) {
    const dir = dirname(source);
    const candidates = existsSync(join(dir, 'tokenizer.bin')) ? ['tokenizer.bin'] : readdirSync(dir).filter((name) => /^tok.*\.bin$/.test(name));
    if (candidates.length === 1) return join(dir, candidates[0]!);
    throw new ChorusError('CHORUS_FILE_MISSING', `no tokenizer for ${source}: give --tokenizer (looked for tokenizer.bin or one tok*.bin in ${dir})`, { param: 'tokenizer' });
  }
  const found = ['tokenizer.model', 'tokenizer.json', 'vocab.json'].map((name) => join(source, name)).find((path) => existsSync(path));
  if (found === undefined) throw new ChorusError('CHORUS_FILE_MISSING', `no tokenizer in ${source}: give --tokenizer (looked for tokenizer.model, tokenizer.json, vocab.json)`, { param: 'tokenizer' });
  return found;
}

/** Pads `vocab` to `size` tokens (`[PAD<id>]`, unused), as checkpoints whose embedding has spare rows need; more tokens than rows is an error. */
export function padVocab(vocab: GgufVocab, size: number): GgufVocab {
  if (vocab.tokens.length > size) {
    throw new ChorusError('CHORUS_FILE_INVALID', `tokenizer ${vocab.source} has ${vocab.tokens.length} tokens, more than the model's vocabulary of ${size}`, { param: 'tokenizer' });
  }
  const extra = Array.from({ length: size - vocab.tokens.length }, (_, i) => vocab.tokens.length + i);
  return {
    ...vocab,
    tokens: [...vocab.tokens, ...extra.map((id) => `[PAD${id}]`)],
    types: [...vocab.types, ...extra.map(() => TokenType.UNUSED)],
    ...(vocab.scores ? { scores: [...vocab.scores, ...extra.map(() => -1000)] } : {}),
  };
}

/** The `tokenizer.ggml.*` metadata of `vocab`; `pre` names llama.cpp's pre-tokenizer for BPE vocabularies. */
export function vocabMetadata(vocab: GgufVocab, pre: string, addBos: boolean): Array<[string, GgufValue]> {
  const entries: Array<[string, GgufValue]> = [
    ['tokenizer.ggml.model', { type: 'string', value: vocab.model }],
    ['tokenizer.ggml.pre', { type: 'string', value: vocab.model === 'llama' ? 'default' : pre }],
    ['tokenizer.ggml.tokens', { type: 'strings', value: vocab.tokens }],
  ];
  if (vocab.scores) entries.push(['tokenizer.ggml.scores', { type: 'f32s', value: vocab.scores }]);
  entries.push(['tokenizer.ggml.token_type', { type: 'i32s', value: vocab.types }]);
  if (vocab.merges) entries.push(['tokenizer.ggml.merges', { type: 'strings', value: vocab.merges }]);
  const ids: Array<[string, number | undefined]> = [['bos', vocab.bos], ['eos', vocab.eos], ['unknown', vocab.unk], ['padding', vocab.pad]];
  for (const [name, id] of ids) if (id !== undefined) entries.push([`tokenizer.ggml.${name}_token_id`, { type: 'u32', value: id }]);
  entries.push(['tokenizer.ggml.add_bos_token', { type: 'bool', value: addBos }]);
  return entries;
}

const BYTE_PIECE = /^<0x[0-9A-Fa-f]{2}>$/;

/** llama2.c's export wrote BOS and EOS as `\n<s>\n` and `\n</s>\n`, and SentencePiece's `▁` as a space. */
function llama2cVocab(file: string): GgufVocab {
  const bytes = readFileSync(file);
  const tokens: string[] = [];
  const scores: number[] = [];
  let offset = 4;
  while (offset < bytes.length) {
    if (offset + 8 > bytes.length) throw new ChorusError('CHORUS_FILE_INVALID', `${file} is not a llama2.c tokenizer.bin: truncated entry at byte ${offset}`);
    scores.push(bytes.readFloatLE(offset));
    const length = bytes.readInt32LE(offset + 4);
    offset += 8;
    if (length < 0 || offset + length > bytes.length) throw new ChorusError('CHORUS_FILE_INVALID', `${file} is not a llama2.c tokenizer.bin: entry ${tokens.length} runs past the end`);
    tokens.push(bytes.subarray(offset, offset + length).toString('utf8'));
    offset += length;
  }
  if (tokens.length < 3) throw new ChorusError('CHORUS_FILE_INVALID', `${file} is not a llama2.c tokenizer.bin: ${tokens.length} entries`);
  tokens[1] = '<s>';
  tokens[2] = '</s>';
  const pieces = tokens.map((t, id) => (id < 3 ? t : t.replaceAll(' ', '\u2581')));
  const types = pieces.map((t, id) => (id === 0 ? TokenType.UNKNOWN : id < 3 ? TokenType.CONTROL : BYTE_PIECE.test(t) ? TokenType.BYTE : TokenType.NORMAL));
  return { source: file, model: 'llama', tokens: pieces, types, scores, unk: 0, bos: 1, eos: 2 };
}

function sentencePieceVocab(file: string): GgufVocab {
  const model = readSentencePieceModel(readFileSync(file));
  const id = (value: number): number | undefined => (value >= 0 ? value : undefined);
  return {
    source: file,
    model: 'llama',
    tokens: model.pieces.map((p) => p.piece),
    scores: model.pieces.map((p) => p.score),
    types: model.pieces.map((p) => p.type),
    unk: id(model.unkId),
    bos: id(model.bosId),
    eos: id(model.eosId),
    pad: id(model.padId),
  };
}

interface TokenizerJson {
  model?: { type?: string; vocab?: Record<string, number>; merges?: Array<string | [string, string]> };
  added_tokens?: Array<{ id: number; content: string; special?: boolean }>;
}

function tokenizerJsonVocab(file: string, specialIds: { bos?: number; eos?: number }): GgufVocab {
  const json = JSON.parse(readFileSync(file, 'utf8')) as TokenizerJson;
  // Older tokenizer.json files (GPT-2's among them) leave the BPE model's type out.
  const type = json.model?.type ?? (json.model?.merges !== undefined ? 'BPE' : undefined);
  if (type !== 'BPE' || json.model?.vocab === undefined) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${file}: model type ${describe(type)} is not a byte-level BPE; give a SentencePiece tokenizer.model with --tokenizer`, { param: 'tokenizer' });
  }
  const merges = (json.model.merges ?? []).map((m) => (typeof m === 'string' ? m : m.join(' ')));
  return bpeVocab(file, json.model.vocab, merges, json.added_tokens ?? [], specialIds);
}

function mergesTxt(file: string): string[] {
  if (!existsSync(file)) throw new ChorusError('CHORUS_FILE_MISSING', `${file} is missing; a vocab.json needs its merges.txt beside it`, { param: 'tokenizer' });
  return readFileSync(file, 'utf8').split('\n').filter((line) => line !== '' && !line.startsWith('#version'));
}

function bpeVocab(file: string, vocab: Record<string, number>, merges: string[], added: TokenizerJson['added_tokens'] & object, specialIds: { bos?: number; eos?: number }): GgufVocab {
  const byId = new Map<number, { token: string; type: number }>();
  for (const [token, id] of Object.entries(vocab)) byId.set(id, { token, type: TokenType.NORMAL });
  for (const a of added) byId.set(a.id, { token: a.content, type: a.special ? TokenType.CONTROL : TokenType.USER_DEFINED });
  const size = Math.max(-1, ...byId.keys()) + 1;
  const tokens: string[] = [];
  const types: number[] = [];
  for (let id = 0; id < size; id++) {
    const entry = byId.get(id);
    tokens.push(entry?.token ?? `[PAD${id}]`);
    types.push(entry?.type ?? TokenType.UNUSED);
  }
  return { source: file, model: 'gpt2', tokens, types, merges, ...specialIds };
}
