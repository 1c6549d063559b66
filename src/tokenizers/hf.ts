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
