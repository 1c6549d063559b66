/** Rules for model definitions beyond their schema. */
import type { Diagnostic } from '../config/diagnostic.ts';
import { diagnosticAt, type Repository } from './repository.ts';
import { checkReference } from './references.ts';

/** Diagnostics for every model definition. */
export function checkModels(repository: Repository): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const definition of repository.models.values()) {
    const value = definition.value;
    if (value.tokenizer !== undefined) out.push(...checkReference(repository, definition, ['tokenizer'], 'tokenizer', value.tokenizer));
    if (value.dynamic_batching !== undefined && value.engine === 'generate') {
      out.push(
        diagnosticAt(definition, ['dynamic_batching'], 'dynamic_batching applies to engines encode and forward; generate batches continuously', { key: true }),
      );
    }
    for (const field of ['inputs', 'outputs'] as const) {
      if (value[field] !== undefined && value.engine !== 'forward') {
        out.push(diagnosticAt(definition, [field], `${field} applies to engine forward only, not ${value.engine}`, { key: true }));
      }
    }
    const device = value.device ?? 'cpu';
    value.instance_group?.forEach((group, index) => {
      if (group.kind === 'gpu' && device === 'cpu') {
        out.push(diagnosticAt(definition, ['instance_group', index, 'kind'], 'instance_group kind gpu needs device cuda or cuda:N, but device is cpu'));
      }
      if (group.gpus !== undefined && group.kind !== 'gpu' && !(group.kind === undefined && device !== 'cpu')) {
        out.push(diagnosticAt(definition, ['instance_group', index, 'gpus'], 'gpus applies to instance groups of kind gpu', { key: true }));
      }
    });
  }
  return out;
}
