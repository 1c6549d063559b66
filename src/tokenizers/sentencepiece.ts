/** SentencePiece `.model` files through `sentencepiece-js` (the WASM build of google/sentencepiece). */
import { readFileSync } from 'node:fs';
import sentencepiece, { type SentencePieceProcessor } from 'sentencepiece-js';
import { ChorusError } from '../errors.ts';
import { PieceType, readSentencePieceModel, type Piece } from './sentencepiece-model.ts';
import { checkIds, specialTokenIds, type DecodeOptions, type EncodeOptions, type SpecialTokenIds, type Tokenizer } from './tokenizer.ts';

/** Options of `SentencePieceAdapter.load`. */
export interface SentencePieceOptions {
  /** Put BOS before encoded text (Llama does). Default: false, as SentencePiece itself. */
  addBos?: boolean | undefined;
  /** Put EOS after encoded text (T5 does). Default: false, as SentencePiece itself. */
  addEos?: boolean | undefined;
  chatTemplate?: string | undefined;
}

/** A tokenizer over a SentencePiece model (unigram or BPE). */
export class SentencePieceAdapter implements Tokenizer {
  readonly kind = 'sentencepiece' as const;
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokenIds;
  readonly chatTemplate: string | undefined;
  private readonly addBos: boolean;
  private readonly addEos: boolean;
  /** pieceText's answers so far (null: none). */
  private readonly pieceTexts: Array<string | null | undefined> = [];

  private constructor(
    private readonly processor: SentencePieceProcessor,
    private readonly pieces: Piece[],
    private readonly addDummyPrefix: boolean,
    ids: { bos: number | undefined; eos: number | undefined; pad: number | undefined; unk: number | undefined },
    options: SentencePieceOptions,
  ) {
    this.vocabSize = pieces.length;
    const control = pieces.flatMap((p, id) => (p.type === PieceType.CONTROL || p.type === PieceType.UNKNOWN ? [id] : []));
    this.specialTokens = specialTokenIds(ids, control);
    this.addBos = options.addBos ?? false;
    this.addEos = options.addEos ?? false;
    this.chatTemplate = options.chatTemplate;
  }

  /** Loads a `.model` file. */
  static async load(path: string, options: SentencePieceOptions = {}): Promise<SentencePieceAdapter> {
    let bytes: Buffer;
    try {
      bytes = readFileSync(path);
    } catch (cause) {
      throw new ChorusError('CHORUS_FILE_MISSING', `SentencePiece model ${path} cannot be read`, { cause });
    }
    let info: ReturnType<typeof readSentencePieceModel>;
    try {
      info = readSentencePieceModel(bytes);
    } catch (cause) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${path} is not a SentencePiece model: ${(cause as Error).message}`, { cause });
    }
    if (info.pieces.length === 0) throw new ChorusError('CHORUS_FILE_INVALID', `${path} is not a SentencePiece model: it has no pieces`);
    const processor = new sentencepiece.SentencePieceProcessor();
    await processor.load(path);
    const id = (value: number): number | undefined => (value >= 0 && value < info.pieces.length ? value : undefined);
    return new SentencePieceAdapter(
      processor,
      info.pieces,
      info.addDummyPrefix,
      { bos: id(info.bosId), eos: id(info.eosId), pad: id(info.padId), unk: id(info.unkId) },
      options,
    );
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const ids = text === '' ? [] : this.processor.encodeIds(text);
    if (options.addSpecialTokens ?? true) {
      if (this.addBos && this.specialTokens.bos !== undefined) ids.unshift(this.specialTokens.bos);
      if (this.addEos && this.specialTokens.eos !== undefined) ids.push(this.specialTokens.eos);
    }
    return ids;
  }

  /** A normal piece's text ("▁" as a space); other pieces' texts depend on their neighbours. */
  pieceText(id: number): string | undefined {
    let text = this.pieceTexts[id];
    if (text === undefined && id >= 0 && id < this.pieces.length) {
      const piece = this.pieces[id]!;
      text = this.pieceTexts[id] = piece.type === PieceType.NORMAL && !this.specialTokens.all.has(id) ? piece.piece.replaceAll('▁', ' ') : null;
    }
    return text ?? undefined;
  }

  /**
   * Text runs between special tokens are decoded by SentencePiece itself (which drops the leading space of
   * the first piece it is given); special tokens are written as their piece, or left out when skipped.
   * A run that follows a written special token keeps its leading space ("<s> Hello"), as Hugging Face does.
   */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    checkIds(ids, this.vocabSize);
    const skip = options.skipSpecialTokens ?? false;
    let text = '';
    let run: number[] = [];
    const flush = (): void => {
      if (run.length === 0) return;
      let part = this.processor.decodeIds(run);
      // SentencePiece drops one leading space of the first piece it decodes; put it back mid-text.
      if (text !== '' && this.addDummyPrefix && this.pieces[run[0]!]!.piece.startsWith('▁')) part = ` ${part}`;
      text += part;
      run = [];
    };
    for (const id of ids) {
      if (this.specialTokens.all.has(id)) {
        if (skip) continue;
        flush();
        text += this.pieces[id]!.piece;
      } else {
        run.push(id);
      }
    }
    flush();
    return text;
  }
}
