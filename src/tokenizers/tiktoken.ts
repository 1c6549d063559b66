/** OpenAI BPE encodings through `tiktoken`: the bundled encodings, or a `.tiktoken` rank file. */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Tiktoken } from 'tiktoken';
import { ChorusError, invalidArgument } from '../errors.ts';
import { checkIds, specialTokenIds, type DecodeOptions, type SpecialTokenIds, type Tokenizer } from './tokenizer.ts';

/** The encodings that ship with `tiktoken`. */
export const TIKTOKEN_ENCODINGS = ['gpt2', 'r50k_base', 'p50k_base', 'p50k_edit', 'cl100k_base', 'o200k_base'] as const;
export type TiktokenEncodingName = (typeof TIKTOKEN_ENCODINGS)[number];

interface EncodingData {
  pat_str: string;
  special_tokens: Record<string, number>;
  bpe_ranks: string;
}

const require = createRequire(import.meta.url);

function encodingData(name: TiktokenEncodingName): EncodingData {
  return require(`tiktoken/encoders/${name}.json`) as EncodingData;
}

/** How many ranks each bundled encoding has: used to recognise a bare `.tiktoken` file. */
const RANK_COUNTS: Record<number, TiktokenEncodingName> = {
  50256: 'r50k_base',
  50280: 'p50k_base',
  100256: 'cl100k_base',
  199998: 'o200k_base',
};

/** Options of `TiktokenAdapter`: an encoding, a rank file, or both (the file's ranks, the encoding's pattern). */
export interface TiktokenOptions {
  /** A bundled encoding; it supplies the pattern and special tokens. */
  encoding?: TiktokenEncodingName | undefined;
  /** Path of a `.tiktoken` rank file (`base64-token rank` per line). */
  file?: string | undefined;
  /** The pre-tokenization regex; default: the encoding's. */
  pattern?: string | undefined;
  /** Special tokens (text -> id); default: the encoding's. */
  specialTokens?: Record<string, number> | undefined;
  chatTemplate?: string | undefined;
}

/** A tokenizer over a tiktoken BPE encoding. */
export class TiktokenAdapter implements Tokenizer {
  readonly kind = 'tiktoken' as const;
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokenIds;
  readonly chatTemplate: string | undefined;
  private readonly bpe: Tiktoken;
  // tiktoken's text is its bytes' UTF-8: a U+FEFF at the start is kept, as anywhere else.
  private readonly textDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
  private readonly ordinaryCount: number;
  /** Each id's bytes, once asked for. */
  private readonly bytes: Array<Uint8Array | undefined> = [];

  constructor(options: TiktokenOptions) {
    let ranks: string;
    let rankCount: number;
    let encoding = options.encoding;
    if (encoding !== undefined && !TIKTOKEN_ENCODINGS.includes(encoding)) {
      throw invalidArgument('encoding', `one of ${TIKTOKEN_ENCODINGS.join(', ')}`, encoding);
    }
    if (options.file !== undefined) {
      try {
        ranks = readFileSync(options.file, 'utf8');
      } catch (cause) {
        throw new ChorusError('CHORUS_FILE_MISSING', `tiktoken rank file ${options.file} cannot be read`, { cause });
      }
      rankCount = ranks.split('\n').filter((line) => line.trim() !== '').length;
      encoding ??= options.pattern === undefined ? RANK_COUNTS[rankCount] : undefined;
      if (encoding === undefined && options.pattern === undefined) {
        throw new ChorusError(
          'CHORUS_CONFIG_INVALID',
          `tiktoken rank file ${options.file} has ${rankCount} ranks, which matches no known encoding; give encoding or pattern`,
          { param: 'pattern' },
        );
      }
    } else if (encoding !== undefined) {
      ranks = encodingData(encoding).bpe_ranks;
      rankCount = -1;
    } else {
      throw new ChorusError('CHORUS_CONFIG_INVALID', 'a tiktoken tokenizer needs encoding or file', { param: 'encoding' });
    }
    const data = encoding === undefined ? undefined : encodingData(encoding);
    const pattern = options.pattern ?? data?.pat_str ?? '';
    const special = options.specialTokens ?? data?.special_tokens ?? {};
    try {
      this.bpe = new Tiktoken(ranks, special, pattern);
    } catch (cause) {
      throw new ChorusError('CHORUS_FILE_INVALID', `tiktoken encoding could not be built: ${String(cause)}`, { cause });
    }
    const ordinary = rankCount >= 0 ? rankCount : this.bpe.token_byte_values().length;
    this.ordinaryCount = ordinary;
    this.vocabSize = Math.max(ordinary, ...Object.values(special).map((id) => id + 1));
    const eot = special['<|endoftext|>'];
    this.specialTokens = specialTokenIds({ bos: eot, eos: eot }, Object.values(special));
    this.chatTemplate = options.chatTemplate;
  }

  encode(text: string): number[] {
    // Special-token text in the input is read as the special token, as Hugging Face tokenizers do.
    return Array.from(this.bpe.encode(text, 'all'));
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    checkIds(ids, this.vocabSize);
    // Encodings can leave ids unused (cl100k_base has none at 100256); the encoder aborts on them.
    const hole = ids.findIndex((id) => id >= this.ordinaryCount && !this.specialTokens.all.has(id));
    if (hole >= 0) throw invalidArgument(`ids[${hole}]`, 'an id the encoding defines', ids[hole]);
    const kept = options.skipSpecialTokens ? ids.filter((id) => !this.specialTokens.all.has(id)) : ids;
    return this.textDecoder.decode(this.bpe.decode(Uint32Array.from(kept)));
  }

  tokenBytes(id: number): Uint8Array {
    let bytes = this.bytes[id];
    if (bytes === undefined) {
      // Refused as decode refuses it.
      this.decode([id]);
      bytes = this.bytes[id] = this.bpe.decode_single_token_bytes(id);
    }
    return bytes;
  }
}
