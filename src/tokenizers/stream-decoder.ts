/**
 * Incremental detokenization: ids in one at a time, text deltas out, such that the deltas joined equal
 * `tokenizer.decode(allIds)` exactly.
 *
 * Invariant: `ids[prefixOffset, readOffset)` is the window whose text was last emitted in full, and it
 * decodes to complete characters. Each push decodes `ids[prefixOffset, end)` and emits what it adds to
 * the window's text, unless that text ends in U+FFFD (an unfinished UTF-8 sequence that later ids may
 * complete): then nothing moves and the next push tries again. Decoding from a window start instead of
 * from the first id keeps each push O(window), and because the window starts one emission back, a
 * SentencePiece piece that opens with "▁" keeps its space (only a text's first piece loses it).
 *
 * A byte-level tokenizer (one with `tokenBytes`: tiktoken's) needs no window: its ids' bytes go through
 * a streaming UTF-8 decoder, which gives the same text as decoding them all at once, with no decode
 * of the ids at each push. A tokenizer with `pieceText` (SentencePiece's) skips the decode where it
 * can: once the window holds visible text and nothing is held back, ids whose text is always the same
 * add just that text; the others (byte pieces, special ids) take the decode.
 */
import type { Tokenizer } from './tokenizer.ts';

/** Options of `StreamDecoder`. */
export interface StreamDecoderOptions {
  /** As `Tokenizer.decode`'s option. Default: false. */
  skipSpecialTokens?: boolean;
  /**
   * Ids that come before the streamed ones (the prompt's tail). They are not emitted; they make the
   * first streamed piece decode as it would mid-text (with its leading space). Default: none.
   */
  context?: readonly number[];
}

/** The text of bytes that are all ASCII (null for others), remembered for each id's bytes. */
const asciiTexts = new WeakMap<Uint8Array, string | null>();
function asciiText(bytes: Uint8Array): string | null {
  let text = asciiTexts.get(bytes);
  if (text === undefined) {
    text = bytes.every((b) => b < 0x80) ? String.fromCharCode(...bytes) : null;
    asciiTexts.set(bytes, text);
  }
  return text;
}

/** How many context ids the first window starts with. */
const CONTEXT_WINDOW = 6;
/** How many ids a window spans before it moves up (each push decodes the window once, a move once more). */
const WINDOW_IDS = 8;

/** Turns a stream of ids into a stream of text deltas. */
export class StreamDecoder {
  private readonly ids: number[];
  private prefixOffset: number;
  private readOffset: number;
  private readonly skipSpecialTokens: boolean;
  /** The text of the window `ids[prefixOffset, readOffset)`, once decoded (each push needs it). */
  private windowText: string | undefined;
  /** A byte-level tokenizer's bytes of an id, and the UTF-8 decoder they stream through. */
  private readonly bytes: ((id: number) => Uint8Array) | undefined;
  // A U+FEFF is text like any other (decode keeps it), wherever the non-ASCII bytes start.
  private readonly utf8 = new TextDecoder('utf-8', { ignoreBOM: true });
  private holding = false;
  /** A tokenizer's fixed text of an id, where it has one (`Tokenizer.pieceText`). */
  private readonly pieceText: ((id: number) => string | undefined) | undefined;
  /** Whether the window's text has a visible character (known without decoding it), else undefined. */
  private windowVisible: boolean | undefined;

  constructor(
    private readonly tokenizer: Tokenizer,
    options: StreamDecoderOptions = {},
  ) {
    const context = options.context ?? [];
    this.ids = context.slice(-CONTEXT_WINDOW);
    this.prefixOffset = 0;
    this.readOffset = this.ids.length;
    this.skipSpecialTokens = options.skipSpecialTokens ?? false;
    this.bytes = tokenizer.tokenBytes?.bind(tokenizer);
    this.pieceText = tokenizer.pieceText?.bind(tokenizer);
  }

  /** Adds ids; returns the text they complete (possibly ''). */
  push(...ids: number[]): string {
    if (this.bytes !== undefined) return this.pushBytes(ids);
    const pieces = this.pushPieces(ids);
    if (pieces !== undefined) return pieces;
    this.windowVisible = undefined;
    this.ids.push(...ids);
    const before = (this.windowText ??= this.decode(this.prefixOffset, this.readOffset));
    const after = this.decode(this.prefixOffset, this.ids.length);
    if (after.length <= before.length || after.endsWith('\uFFFD') || !after.startsWith(before)) return '';
    // A window must open on visible text: SentencePiece drops every leading whitespace-only piece of
    // what it decodes, so a window opening on a lone "▁" would lose that space from the next delta.
    // The window moves up to the last emission once it spans WINDOW_IDS ids: until then its text is
    // `after`, with no decode of the new ids alone.
    const added = this.readOffset - this.prefixOffset >= WINDOW_IDS ? this.decode(this.readOffset, this.ids.length) : '';
    if (/\S/u.test(added)) {
      this.prefixOffset = this.readOffset;
      this.windowText = added;
    } else this.windowText = after;
    this.readOffset = this.ids.length;
    return after.slice(before.length);
  }

  /**
   * Ids that each add their fixed text, after a window of visible text with nothing held back: that text,
   * the window moving up as push does. Undefined (nothing done) where push must decode.
   */
  private pushPieces(ids: readonly number[]): string | undefined {
    if (this.pieceText === undefined || this.readOffset !== this.ids.length || this.prefixOffset === this.readOffset) return undefined;
    let text = '';
    for (const id of ids) {
      // Special ids have no fixed text (Tokenizer.pieceText): they take the decode, skipped or written.
      const piece = this.pieceText(id);
      if (piece === undefined) return undefined;
      text += piece;
    }
    this.windowVisible ??= this.visibleRun();
    if (!this.windowVisible) return undefined;
    if (this.readOffset - this.prefixOffset >= WINDOW_IDS && /\S/u.test(text)) {
      // The new ids open the next window; its text (decoded from its start) is left to the next decode.
      this.prefixOffset = this.readOffset;
      this.windowText = undefined;
    } else if (this.windowText !== undefined) {
      this.windowText += text;
    }
    this.ids.push(...ids);
    this.readOffset = this.ids.length;
    return text;
  }

  /**
   * Whether the window ends in visible text of its own run: `decode` writes a special id as its piece
   * and decodes the ids after it as a new run (whose leading spaces SentencePiece may drop), so the
   * text that counts is that after the window's last written special id.
   */
  private visibleRun(): boolean {
    let start = this.prefixOffset;
    if (!this.skipSpecialTokens) {
      for (let i = this.readOffset - 1; i >= this.prefixOffset; i--) {
        if (this.tokenizer.specialTokens.all.has(this.ids[i]!)) {
          start = i + 1;
          break;
        }
      }
    }
    if (start === this.prefixOffset) return /\S/u.test((this.windowText ??= this.decode(this.prefixOffset, this.readOffset)));
    return start < this.readOffset && /\S/u.test(this.decode(start, this.readOffset));
  }

  /**
   * A byte-level tokenizer's ids: their bytes through a streaming UTF-8 decoder, which holds a split
   * character back. An id of ASCII bytes alone, when the decoder holds nothing, is its text as it is.
   */
  private pushBytes(ids: readonly number[]): string {
    let text = '';
    for (const id of ids) {
      if (this.skipSpecialTokens && this.tokenizer.specialTokens.all.has(id)) continue;
      const bytes = this.bytes!(id);
      const ascii = this.holding ? null : asciiText(bytes);
      if (ascii !== null) {
        text += ascii;
        continue;
      }
      text += this.utf8.decode(bytes, { stream: true });
      // Whether the decoder may hold the start of a character: not after an ASCII byte.
      this.holding = bytes.length > 0 ? bytes[bytes.length - 1]! >= 0x80 : this.holding;
    }
    return text;
  }

  /** Ends the stream: returns whatever was held back (an unfinished character decodes as U+FFFD). */
  flush(): string {
    if (this.bytes !== undefined) {
      this.holding = false;
      return this.utf8.decode();
    }
    const before = this.windowText ?? this.decode(this.prefixOffset, this.readOffset);
    const after = this.decode(this.prefixOffset, this.ids.length);
    this.prefixOffset = this.readOffset = this.ids.length;
    this.windowText = '';
    return after.startsWith(before) ? after.slice(before.length) : after;
  }

  private decode(start: number, end: number): string {
    return this.tokenizer.decode(this.ids.slice(start, end), { skipSpecialTokens: this.skipSpecialTokens });
  }
}
