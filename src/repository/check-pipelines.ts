/** Rules for pipeline definitions: what they run exists, and their fields reach the ensemble's inputs. */
import { LIST_FIELDS, STANDARD_FIELDS } from '../config/index.ts';
import type { Diagnostic } from '../config/diagnostic.ts';
import { describe } from '../errors.ts';
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
        if (!('text_input' in (value.fields ?? {}))) at(['fields'], `fields maps no input to text_input, the request's text (inputs of ensemble ${value.ensemble}: ${Object.keys(inputs).join(', ')})`, true);
        const outputs = Object.keys(ensemble.value.outputs);
        if (value.text_output !== undefined && !outputs.includes(value.text_output)) {
          at(['text_output'], `text_output ${value.text_output} is not an output of ensemble ${value.ensemble} (outputs: ${outputs.join(', ')})`);
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
      for (const [field, given] of Object.entries(value.defaults ?? {})) {
        const problem = defaultProblem(field, given);
        if (problem !== undefined) at(['defaults', field], problem, problem.startsWith('default for'));
      }
    }
    if (value.chat_template !== undefined && value.chat_template !== 'tokenizer') {
      out.push(...checkTemplate(definition, ['chat_template'], value.chat_template));
    }
  }
  return out;
}

/** What is wrong with a model pipeline's default for `field`, if anything: a field it has, of its type. */
function defaultProblem(field: string, value: unknown): string | undefined {
  if (field === 'stop') return typeof value === 'string' || (Array.isArray(value) && value.every((v) => typeof v === 'string')) ? undefined : `defaults.stop must be a string or a list of strings, got ${describe(value)}`;
  const standard = STANDARD_FIELDS[field];
  if (standard === undefined) return `default for ${field}, which is not a field of a model pipeline (fields: stop, ${Object.keys(STANDARD_FIELDS).join(', ')})`;
  const datatype = standard[1];
  const one = (v: unknown): boolean =>
    datatype === 'BOOL' ? typeof v === 'boolean' : datatype.startsWith('UINT') ? Number.isInteger(v) && (v as number) >= 0 : typeof v === 'number' && Number.isFinite(v);
  const ok = LIST_FIELDS.has(field) ? Array.isArray(value) && value.every(one) : one(value);
  const [single, list] = datatype === 'BOOL' ? ['true or false', 'a list of true or false'] : datatype.startsWith('UINT') ? ['an integer >= 0', 'a list of integers >= 0'] : ['a number', 'a list of numbers'];
  return ok ? undefined : `defaults.${field} must be ${LIST_FIELDS.has(field) ? list : single}, got ${describe(value)}`;
}
