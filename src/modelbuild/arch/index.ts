/** The registry of architectures, by `model_type`. */
import { ChorusError, describe } from '../../errors.ts';
import type { ModelConfig } from '../checkpoint.ts';
import type { Architecture } from './architecture.ts';
import { bart } from './bart.ts';
import { gemma2 } from './gemma2.ts';
import { gpt2 } from './gpt2.ts';
import { llama } from './llama.ts';
import { mistral } from './mistral.ts';
import { phi3 } from './phi3.ts';
import { t5 } from './t5.ts';

export type { Architecture, DecoderArchitecture, Seq2SeqArchitecture } from './architecture.ts';

const ARCHITECTURES: readonly Architecture[] = [gpt2, llama, phi3, mistral, gemma2, t5, bart];

/** The architecture that builds `config`'s `model_type`. */
export function architectureFor(config: ModelConfig): Architecture {
  const type = config.model_type;
  const found = ARCHITECTURES.find((a) => a.modelTypes.includes(String(type)));
  if (found === undefined) {
    const known = ARCHITECTURES.flatMap((a) => a.modelTypes).join(', ');
    throw new ChorusError('CHORUS_UNSUPPORTED', `config.json: model_type ${describe(type)} is not supported; supported: ${known}`, { param: 'model_type', value: type });
  }
  return found;
}
