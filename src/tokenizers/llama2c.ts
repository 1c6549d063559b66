/**
 * llama2.c `tokenizer.bin` files: a vocabulary with merge scores. Encoding follows llama2.c's `encode`:
 * a dummy space prefix, one token per code point (or `<0xNN>` byte tokens where the code point is not in
 * the vocabulary), then the adjacent pair whose concatenation is in the vocabulary with the highest score
 * is merged, leftmost first among equals, until no pair merges.
 */
import { readFileSync } from 'node:fs';
import { ChorusError } from '../errors.ts';
import { checkIds, specialTokenIds, type DecodeOptions, type EncodeOptions, type SpecialTokenIds, type Tokenizer } from './tokenizer.ts';

const UNK = 0;
const BOS = 1;
const EOS = 2;
const BYTE_PIECE = /^<0x([0-9A-Fa-f]{2})>$/;

/** Options of `Llama2cTokenizer`. */
export interface Llama2cOptions {
  /** Put BOS (id 1) before encoded text. Default: true. */
  addBos?: boolean | undefined;
  /** Put EOS (id 2) after encoded text. Default: false. */
  addEos?: boolean | undefined;
  chatTemplate?: string | undefined;
}

/** A tokenizer read from a llama2.c `tokenizer.bin`. */
export class Llama2cTokenizer implements Tokenizer {
  readonly kind = 'llama2c' as const;
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokenIds = specialTokenIds({ bos: BOS, eos: EOS, unk: UNK });
  readonly chatTemplate: string | undefined;
  /** Each piece's bytes, with `<0xNN>` pieces already turned into their byte. */
  private readonly pieceBytes: Uint8Array[];
  private readonly scores: Float32Array;
  /** Each piece as stored (`<0xNN>` kept as text), as a latin1 string: one char per byte. */
  private readonly rawKeys: string[];
  /** Stored piece (latin1 string) -> lowest id with it. */
  private readonly lookup = new Map<string, number>();
  private readonly addBos: boolean;
  private readonly addEos: boolean;
  private readonly textDecoder = new TextDecoder('utf-8');

  constructor(file: Uint8Array, options: Llama2cOptions = {}) {
    const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
    const pieces: Uint8Array[] = [];
    const scores: number[] = [];
    let offset = 4; // int32 max_token_length, not needed
    while (offset < file.byteLength) {
      if (offset + 8 > file.byteLength) throw invalid(`truncated entry at byte ${offset}`);
      scores.push(view.getFloat32(offset, true));
      const length = view.getInt32(offset + 4, true);
      offset += 8;
      if (length < 0 || offset + length > file.byteLength) throw invalid(`entry ${pieces.length} has length ${length} past the end`);
      pieces.push(file.subarray(offset, offset + length));
      offset += length;
    }
    if (pieces.length <= EOS) throw invalid(`it has ${pieces.length} entries; at least <unk>, <s> and </s> are needed`);
    this.vocabSize = pieces.length;
    this.scores = Float32Array.from(scores);
    this.pieceBytes = pieces.map((bytes) => {
      const byte = BYTE_PIECE.exec(Buffer.from(bytes).toString('latin1'));
      return byte ? Uint8Array.of(Number.parseInt(byte[1]!, 16)) : bytes;
    });
    this.rawKeys = pieces.map((bytes) => Buffer.from(bytes).toString('latin1'));
    this.rawKeys.forEach((key, id) => {
      if (!this.lookup.has(key)) this.lookup.set(key, id);
    });
    this.addBos = options.addBos ?? true;
    this.addEos = options.addEos ?? false;
    this.chatTemplate = options.chatTemplate;
  }

  /** Reads a `tokenizer.bin` file. */
  static load(path: string, options: Llama2cOptions = {}): Llama2cTokenizer {
    let bytes: Buffer;
    try {
      bytes = readFileSync(path);
    } catch (cause) {
      throw new ChorusError('CHORUS_FILE_MISSING', `llama2.c tokenizer ${path} cannot be read`, { cause });
    }
    try {
      return new Llama2cTokenizer(bytes, options);
    } catch (error) {
      if (error instanceof ChorusError) throw new ChorusError(error.code, `${path}: ${error.message}`, { cause: error });
      throw error;
    }
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const special = options.addSpecialTokens ?? true;
    const ids: number[] = [];
    if (text !== '') {
      const space = this.lookup.get(' ');
      if (space !== undefined) ids.push(space);
      for (const codePoint of text) {
        const key = Buffer.from(codePoint, 'utf8').toString('latin1');
        const id = this.lookup.get(key);
        if (id !== undefined) ids.push(id);
        // Byte fallback: the first 3 ids are <unk>, <s>, </s>, then one id per byte value.
        else for (let i = 0; i < key.length; i++) ids.push(key.charCodeAt(i) + 3);
      }
    }
    const merged = this.merge(ids);
    if (special && this.addBos) merged.unshift(BOS);
    if (special && this.addEos) merged.push(EOS);
    return merged;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    checkIds(ids, this.vocabSize);
    const skip = options.skipSpecialTokens ?? false;
    const parts: Uint8Array[] = [];
    // llama2.c drops the leading space of the piece after BOS; the text's first piece is treated the same.
    let atStart = true;
    for (const id of ids) {
      if (this.specialTokens.all.has(id)) {
        if (id === BOS) atStart = true;
        else if (!skip) atStart = false;
        if (!skip) parts.push(Buffer.from(id === BOS ? '<s>' : id === EOS ? '</s>' : '<unk>'));
        continue;
      }
      let bytes = this.pieceBytes[id]!;
      if (atStart && bytes[0] === 0x20) bytes = bytes.subarray(1);
      atStart = false;
      parts.push(bytes);
    }
    return this.textDecoder.decode(Buffer.concat(parts));
  }

  /**
   * Merges best-scored pairs until none is left. Same result as llama2.c's quadratic scan, in
   * O(n log n): a heap of candidate pairs by (score desc, position asc) over a linked list of tokens;
   * stale candidates are skipped when popped.
   */
  private merge(initial: number[]): number[] {
    const n = initial.length;
    if (n < 2) return initial;
    const id = Int32Array.from(initial);
    const next = new Int32Array(n).map((_, i) => (i + 1 < n ? i + 1 : -1));
    const prev = new Int32Array(n).map((_, i) => i - 1);
    const alive = new Uint8Array(n).fill(1);
    const heap = new PairHeap();
    const push = (left: number): void => {
      const right = next[left]!;
      if (right < 0) return;
      // As llama2.c: the pieces' stored text is concatenated, so byte tokens never merge.
      const merged = this.lookup.get(this.rawKeys[id[left]!]! + this.rawKeys[id[right]!]!);
      if (merged !== undefined) heap.push({ score: this.scores[merged]!, left, right, leftId: id[left]!, rightId: id[right]!, merged });
    };
    for (let i = 0; i + 1 < n; i++) push(i);
    for (let pair = heap.pop(); pair !== undefined; pair = heap.pop()) {
      const { left, right } = pair;
      // Stale: one side was merged away or changed since this candidate was pushed.
      if (!alive[left] || !alive[right] || next[left] !== right || id[left] !== pair.leftId || id[right] !== pair.rightId) continue;
      id[left] = pair.merged;
      alive[right] = 0;
      next[left] = next[right]!;
      if (next[right]! >= 0) prev[next[right]!] = left;
      if (prev[left]! >= 0) push(prev[left]!);
      push(left);
    }
    const out: number[] = [];
    for (let i = 0; i >= 0; i = next[i]!) out.push(id[i]!);
    return out;
  }
}

function invalid(detail: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `not a llama2.c tokenizer.bin: ${detail}`);
}

interface PairCandidate {
  score: number;
  left: number;
  right: number;
  leftId: number;
  rightId: number;
  merged: number;
}

/** A binary max-heap of merge candidates: higher score first, then the leftmost. */
class PairHeap {
  private readonly items: PairCandidate[] = [];

  push(item: PairCandidate): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): PairCandidate | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < items.length && before(items[l]!, items[best]!)) best = l;
        if (r < items.length && before(items[r]!, items[best]!)) best = r;
        if (best === i) break;
        [items[i], items[best]] = [items[best]!, items[i]!];
        i = best;
      }
    }
    return top;
  }
}

function before(a: PairCandidate, b: PairCandidate): boolean {
  return a.score > b.score || (a.score === b.score && a.left < b.left);
}
