/** The real tokenizers every tokenizer test runs over, opened once. */
import { Llama2cTokenizer, openTokenizerPath, SentencePieceAdapter, TiktokenAdapter, type Tokenizer } from '../../src/tokenizers/index.ts';
import { STORIES, TOKENIZERS } from './paths.ts';

export interface RealTokenizers {
  gpt2Json: Tokenizer;
  gpt2Tiktoken: Tokenizer;
  t5Json: Tokenizer;
  t5Spm: Tokenizer;
  llamaSpm: Tokenizer;
  llamaBin: Tokenizer;
  storiesBin: Tokenizer;
}

let opened: Promise<RealTokenizers> | undefined;

/** Each adapter over the real files in ../shared. */
export function realTokenizers(): Promise<RealTokenizers> {
  opened ??= (async () => ({
    gpt2Json: await openTokenizerPath(`${TOKENIZERS}/gpt2/tokenizer.json`),
    gpt2Tiktoken: new TiktokenAdapter({ encoding: 'gpt2' }),
    t5Json: await openTokenizerPath(`${TOKENIZERS}/t5/tokenizer.json`),
    t5Spm: await SentencePieceAdapter.load(`${TOKENIZERS}/t5/spiece.model`, { addEos: true }),
    llamaSpm: await SentencePieceAdapter.load(`${TOKENIZERS}/llama2-32k/tokenizer.model`, { addBos: true }),
    llamaBin: Llama2cTokenizer.load(`${TOKENIZERS}/llama2-32k/tokenizer.bin`),
    storiesBin: Llama2cTokenizer.load(`${STORIES}/tok512.bin`),
  }))();
  return opened;
}
