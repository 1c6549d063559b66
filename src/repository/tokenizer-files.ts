/** Which file of a tokenizer's source directory holds the tokenizer. */
import type { TokenizerDefinition } from '../config/schemas.ts';

/** The file names to try, in order, inside a tokenizer's source directory. */
export function tokenizerFileCandidates(definition: TokenizerDefinition): string[] {
  if (definition.file !== undefined) return [definition.file];
  switch (definition.type) {
    case 'huggingface':
      return ['tokenizer.json'];
    case 'sentencepiece':
      return ['tokenizer.model', 'spiece.model', 'sentencepiece.bpe.model'];
    case 'llama2c':
      return ['tokenizer.bin'];
    case 'tiktoken':
      return [`${definition.encoding ?? 'cl100k_base'}.tiktoken`];
  }
}
