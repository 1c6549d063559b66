export type { Tokenizer, TokenizerKind, EncodeOptions, DecodeOptions, SpecialTokenIds } from './tokenizer.ts';
export { HfTokenizerAdapter, type HfTokenizerConfig, type HfTokenizerOptions, type SpecialTokenNames } from './hf.ts';
export { TiktokenAdapter, TIKTOKEN_ENCODINGS, type TiktokenEncodingName, type TiktokenOptions } from './tiktoken.ts';
export { SentencePieceAdapter, type SentencePieceOptions } from './sentencepiece.ts';
export { Llama2cTokenizer, type Llama2cOptions } from './llama2c.ts';
export { StreamDecoder, type StreamDecoderOptions } from './stream-decoder.ts';
export { toWordList, parseWordCsv, type WordListTensor } from './word-list.ts';
export { openTokenizerPath, openHfTokenizerJson } from './open.ts';
export { readSentencePieceModel, type SentencePieceModelInfo } from './sentencepiece-model.ts';
