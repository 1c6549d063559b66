/** Rules for pipeline definitions: what they run exists, and their fields reach the ensemble's inputs. */
import type { Diagnostic } from '../config/diagnostic.ts';
import { checkTemplate } from './check-tokenizers.ts';
import { checkReference } from './references.ts';
import { diagnosticAt, type Repository } from './repository.ts';

/** Diagnostics for every pipeline definition. */
export function checkPipelines(repository: Repository): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const definition of repository.pipelines.values()) {
    const value = definition.value;
    const at = (path: Array<string | number>, message: string, key = false): void => {
      out.push(diagnosticAt(definition, path, message, { key }));
    };
    if ((value.ensemble === undefined) === (value.model === undefined)) {
      at([], 'a pipeline names exactly one of ensemble (any graph) or model (the tokenize -> generate -> detokenize shortcut)');
    }
    if (value.ensemble !== undefined) {
      out.push(...checkReference(repository, definition, ['ensemble'], 'ensemble', value.ensemble));
      if (value.tokenizer !== undefined) at(['tokenizer'], 'tokenizer applies to model pipelines; an ensemble names its own tokenizers', true);
      const ensemble = repository.ensembles.get(value.ensemble);
      if (ensemble !== undefined) {
        const inputs = ensemble.value.inputs;
        const fed = new Set<string>();
        for (const [field, tensor] of Object.entries(value.fields ?? {})) {
          if (!(tensor in inputs)) {
            at(['fields', field], `field ${field} maps to ${tensor}, which is not an input of ensemble ${value.ensemble} (inputs: ${Object.keys(inputs).join(', ')})`);
          }
          fed.add(tensor);
        }
        for (const [name, spec] of Object.entries(inputs)) {
          if (!spec.optional && !fed.has(name)) at(['fields'], `required input ${name} of ensemble ${value.ensemble} is fed by no field`, value.fields !== undefined);
        }
        for (const field of Object.keys(value.defaults ?? {})) {
          if (!(field in (value.fields ?? {}))) at(['defaults', field], `default for ${field}, which is not one of this pipeline's fields`, true);
        }
      }
    }
    if (value.model !== undefined) {
      out.push(...checkReference(repository, definition, ['model'], 'model', value.model));
      const model = repository.models.get(value.model);
      if (model !== undefined && model.value.engine !== 'generate') {
        at(['model'], `model ${value.model} has engine ${model.value.engine}; a model pipeline needs engine generate`);
      }
      if (value.tokenizer !== undefined) {
        out.push(...checkReference(repository, definition, ['tokenizer'], 'tokenizer', value.tokenizer));
      } else if (model !== undefined && model.value.tokenizer === undefined) {
        at(['model'], `model ${value.model} names no tokenizer; give the pipeline a tokenizer`);
      }
      if (value.fields !== undefined) at(['fields'], 'fields applies to ensemble pipelines; a model pipeline takes the standard request fields', true);
    }
    if (value.chat_template !== undefined && value.chat_template !== 'tokenizer') {
      out.push(...checkTemplate(definition, ['chat_template'], value.chat_template));
    }
  }
  return out;
}
