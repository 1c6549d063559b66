/** Rules for tokenizer definitions that a schema cannot say: which fields go with which type, and that a fallback exists. */
import { Template } from '@huggingface/jinja';
import type { Diagnostic } from '../config/diagnostic.ts';
import type { TokenizerDefinition } from '../config/schemas.ts';
import { checkReference } from './references.ts';
import { diagnosticAt, type Definition, type Repository } from './repository.ts';

/** Fields that only some tokenizer types accept. */
const ONLY_FOR: Partial<Record<keyof TokenizerDefinition, ReadonlyArray<TokenizerDefinition['type']>>> = {
  encoding: ['tiktoken'],
  pattern: ['tiktoken'],
  special_tokens: ['huggingface'],
  add_bos: ['sentencepiece', 'llama2c'],
  add_eos: ['sentencepiece', 'llama2c'],
};

/** Diagnostics for every tokenizer definition. */
export function checkTokenizers(repository: Repository): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const definition of repository.tokenizers.values()) {
    const value = definition.value;
    for (const [field, types] of Object.entries(ONLY_FOR) as Array<[keyof TokenizerDefinition, TokenizerDefinition['type'][]]>) {
      if (value[field] !== undefined && !types.includes(value.type)) {
        out.push(diagnosticAt(definition, [field], `${field} applies to type ${types.join(' or ')} only, not ${value.type}`, { key: true }));
      }
    }
    if (value.type === 'tiktoken') {
      if (value.source === undefined && value.encoding === undefined) {
        out.push(diagnosticAt(definition, [], 'a tiktoken tokenizer needs encoding (a bundled encoding) or source (a .tiktoken file)'));
      }
    } else if (value.source === undefined) {
      out.push(diagnosticAt(definition, [], `a ${value.type} tokenizer needs source: a path or hf:<org>/<name>`));
    }
    if (value.chat_template !== undefined) out.push(...checkTemplate(definition, ['chat_template'], value.chat_template));
    if (value.fallback !== undefined) {
      const chain = [definition.name];
      for (let next: string | undefined = value.fallback; next !== undefined && !chain.includes(next); next = repository.tokenizers.get(next)?.value.fallback) chain.push(next);
      const back = repository.tokenizers.get(chain.at(-1)!)?.value.fallback;
      if (back !== undefined && chain.includes(back)) out.push(diagnosticAt(definition, ['fallback'], `fallbacks must not come back round: ${[...chain, back].join(' -> ')}`));
      else out.push(...checkReference(repository, definition, ['fallback'], 'tokenizer', value.fallback));
    }
  }
  return out;
}

/** Parses a Jinja template; a syntax error is reported at the template's field. */
export function checkTemplate(definition: Definition<'tokenizer' | 'pipeline'>, path: string[], template: string): Diagnostic[] {
  try {
    new Template(template);
    return [];
  } catch (error) {
    return [diagnosticAt(definition, path, `chat template does not parse: ${(error as Error).message}`)];
  }
}
