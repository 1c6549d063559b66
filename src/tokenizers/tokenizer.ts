/** The tokenizer interface every adapter implements. */
import { invalidArgument } from '../errors.ts';

/** Options of `Tokenizer.encode`. */
export interface EncodeOptions {
  /** Add the tokenizer's special tokens (BOS, EOS, ...) as its post-processor says. Default: true. */
  addSpecialTokens?: boolean;
}

/** Options of `Tokenizer.decode`. */
export interface DecodeOptions {
  /** Leave special tokens (BOS, EOS, PAD, UNK, added special tokens) out of the text. Default: false. */
  skipSpecialTokens?: boolean;
}

/** The ids of a tokenizer's special tokens; `undefined` where the tokenizer has none. */
export interface SpecialTokenIds {
  bos: number | undefined;
  eos: number | undefined;
  pad: number | undefined;
  unk: number | undefined;
  /** Every id that `decode({ skipSpecialTokens: true })` leaves out. */
  all: ReadonlySet<number>;
}

/** Which library or format backs a tokenizer. */
export type TokenizerKind = 'huggingface' | 'tiktoken' | 'sentencepiece' | 'llama2c';

/** Text to ids and back, for one vocabulary. */
export interface Tokenizer {
  readonly kind: TokenizerKind;
  /** Number of ids, added tokens included (ids are in [0, vocabSize)). */
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokenIds;
  /** The Jinja chat template, where the tokenizer files or the definition give one. */
  readonly chatTemplate: string | undefined;
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /**
   * Byte-level tokenizers only (an id stands for the same bytes wherever it is, and `decode` is the
   * UTF-8 text of the ids' bytes): the bytes of one id, so that text can be decoded incrementally.
   * Throws for an id `decode` refuses.
   */
  tokenBytes?(id: number): Uint8Array;
  /**
   * Tokenizers whose text is their pieces' texts one after another (SentencePiece's): the text an id
   * adds after visible text, where that is always the same; undefined for ids whose text depends on
   * their neighbours (byte pieces, special and unknown ids), which are decoded with them instead.
   */
  pieceText?(id: number): string | undefined;
}

/** Builds a `SpecialTokenIds`, keeping only ids that are set. */
export function specialTokenIds(
  ids: { bos?: number | undefined; eos?: number | undefined; pad?: number | undefined; unk?: number | undefined },
  extra: Iterable<number> = [],
): SpecialTokenIds {
  const all = new Set<number>(extra);
  for (const id of [ids.bos, ids.eos, ids.pad, ids.unk]) if (id !== undefined) all.add(id);
  return { bos: ids.bos, eos: ids.eos, pad: ids.pad, unk: ids.unk, all };
}

/** Throws unless every id is an integer in [0, vocabSize). */
export function checkIds(ids: readonly number[], vocabSize: number): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw invalidArgument(`ids[${i}]`, `a token id, an integer in [0, ${vocabSize - 1}]`, id);
    }
  }
}
