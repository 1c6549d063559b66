/** Hugging Face `tokenizer.json` (+ `tokenizer_config.json`) through `@huggingface/tokenizers`. */
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { ChorusError } from '../errors.ts';
import { checkIds, specialTokenIds, type DecodeOptions, type EncodeOptions, type SpecialTokenIds, type Tokenizer } from './tokenizer.ts';

/** The parts of `tokenizer_config.json` Chorus reads. */
export interface HfTokenizerConfig {
  bos_token?: string | { content: string } | null;
  eos_token?: string | { content: string } | null;
  pad_token?: string | { content: string } | null;
  unk_token?: string | { content: string } | null;
  chat_template?: string | Array<{ name: string; template: string }> | null;
  clean_up_tokenization_spaces?: boolean;
  [key: string]: unknown;
}

/** Special-token overrides by token text. */
export interface SpecialTokenNames {
  bos?: string | undefined;
  eos?: string | undefined;
  pad?: string | undefined;
  unk?: string | undefined;
}

/** Options of `HfTokenizerAdapter`. */
export interface HfTokenizerOptions {
  /** The parsed `tokenizer_config.json`, when there is one. */
  config?: HfTokenizerConfig | undefined;
  /** Special tokens named explicitly; they win over the config. */
  specialTokens?: SpecialTokenNames | undefined;
  /** A chat template that wins over the config's. */
  chatTemplate?: string | undefined;
}

const FALLBACK_NAMES: Record<keyof SpecialTokenNames, string[]> = {
  bos: ['<s>', '<|begin_of_text|>', '<|endoftext|>', '<|im_start|>'],
  eos: ['</s>', '<|end_of_text|>', '<|endoftext|>', '<|im_end|>'],
  pad: ['<pad>', '<|pad|>'],
  unk: ['<unk>', '<|unk|>'],
};

/** A tokenizer read from a Hugging Face `tokenizer.json`. */
export class HfTokenizerAdapter implements Tokenizer {
  readonly kind = 'huggingface' as const;
  readonly vocabSize: number;
  readonly specialTokens: SpecialTokenIds;
  readonly chatTemplate: string | undefined;
  private readonly tokenizer: HfTokenizer;
  private readonly cleanUpSpaces: boolean;
  /** Byte-level BPE (GPT-2, Llama 3, Qwen): each id's bytes. */
  readonly tokenBytes?: (id: number) => Uint8Array;

  constructor(tokenizerJson: object, options: HfTokenizerOptions = {}) {
    const config = options.config ?? {};
    try {
      this.tokenizer = new HfTokenizer(tokenizerJson, config);
    } catch (cause) {
      throw new ChorusError('CHORUS_FILE_INVALID', `tokenizer.json could not be read: ${(cause as Error).message}`, { cause });
    }
    const vocab = this.tokenizer.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) if (id > maxId) maxId = id;
    this.vocabSize = maxId + 1;
    // Cleaning up spaces (" ." -> ".") breaks decode(encode(s)) == s; only a config that asks gets it.
    this.cleanUpSpaces = config.clean_up_tokenization_spaces === true;

    const resolve = (role: keyof SpecialTokenNames): number | undefined => {
      const named = options.specialTokens?.[role] ?? tokenText(config[`${role}_token`]);
      if (named !== undefined) {
        const id = this.tokenizer.token_to_id(named);
        if (id === undefined) {
          throw new ChorusError('CHORUS_CONFIG_INVALID', `special token ${role} "${named}" is not in the vocabulary`, {
            param: `special_tokens.${role}`,
            value: named,
          });
        }
        return id;
      }
      for (const candidate of FALLBACK_NAMES[role]) {
        const id = this.tokenizer.token_to_id(candidate);
        if (id !== undefined) return id;
      }
      return undefined;
    };
    const added = [...this.tokenizer.get_added_tokens_decoder()].filter(([, t]) => t.special).map(([id]) => id);
    this.specialTokens = specialTokenIds(
      { bos: resolve('bos'), eos: resolve('eos'), pad: resolve('pad'), unk: resolve('unk') },
      added,
    );
    this.chatTemplate = options.chatTemplate ?? defaultChatTemplate(config.chat_template);

    // A byte-level BPE's decode is the UTF-8 text of its tokens' bytes (each character one byte of
    // GPT-2's table), its added tokens written as their text: streaming needs no decode at each id.
    // (decode turns the bytes before an added token to text on their own; a streaming UTF-8 decoder
    // gives the same text, since an added token's text is whole characters.)
    const json = tokenizerJson as { model?: { type?: unknown; merges?: unknown; end_of_word_suffix?: unknown }; decoder?: { type?: unknown } | null };
    // Older files leave the model's type out; a BPE is the one with merges.
    const bpe = json.model?.type === 'BPE' || (json.model?.type === undefined && json.model?.merges !== undefined);
    // A stream skips the ids of specialTokens.all; decode skips the library's own special tokens: the
    // two must be one set (a pad token named in the config that is a plain token, an added token the
    // config lists as special, are not).
    const librarySpecial = new Set((this.tokenizer as unknown as { all_special_ids?: number[] }).all_special_ids ?? []);
    const sameSpecial = librarySpecial.size === this.specialTokens.all.size && [...librarySpecial].every((id) => this.specialTokens.all.has(id));
    const suffix = json.model?.end_of_word_suffix;
    if (bpe && json.decoder?.type === 'ByteLevel' && (suffix === undefined || suffix === null || suffix === '') && sameSpecial && !this.cleanUpSpaces) {
      const added = new Set([...this.tokenizer.get_added_tokens_decoder().values()].map((token) => token.content));
      const bytes: Array<Uint8Array | undefined> = [];
      const utf8 = new TextEncoder();
      this.tokenBytes = (id: number): Uint8Array => {
        let known = bytes[id];
        if (known === undefined) {
          checkIds([id], this.vocabSize);
          const token = this.tokenizer.id_to_token(id) ?? '';
          known = bytes[id] = added.has(token) ? utf8.encode(token) : Uint8Array.from([...token], (c) => UNICODE_TO_BYTE.get(c) ?? 0);
        }
        return known;
      };
    }
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (ids.length === 0) return '';
    checkIds(ids, this.vocabSize);
    return this.tokenizer.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: this.cleanUpSpaces,
    });
  }
}

/** GPT-2's byte-level table, read backwards: the character that stands for each byte, to the byte. */
const UNICODE_TO_BYTE = (() => {
  const map = new Map<string, number>();
  let next = 256;
  for (let byte = 0; byte < 256; byte++) {
    const printable = (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae && byte <= 0xff);
    map.set(String.fromCodePoint(printable ? byte : next++), byte);
  }
  return map;
})();

function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return undefined;
}

function defaultChatTemplate(value: HfTokenizerConfig['chat_template']): string | undefined {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.find((t) => t.name === 'default')?.template ?? value[0]?.template;
  return undefined;
}
