/** Rules for model definitions beyond their schema. */
import type { Diagnostic } from '../config/diagnostic.ts';
import { diagnosticAt, type Definition, type Repository } from './repository.ts';
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
    if (value.dtype === 'bf16') out.push(...checkBf16(definition, device));
    if (value.group_size !== undefined && value.weights !== 'int4') out.push(diagnosticAt(definition, ['group_size'], `group_size applies to weights int4, not ${value.weights ?? 'checkpoint'}`, { key: true }));
    if (value.end_ids !== undefined && value.engine !== 'generate') out.push(diagnosticAt(definition, ['end_ids'], `end_ids applies to engine generate, not ${value.engine}`, { key: true }));
    if (value.weights !== undefined && value.weights !== 'checkpoint' && value.engine !== 'generate') {
      out.push(diagnosticAt(definition, ['weights'], `weights ${value.weights} applies to engine generate (decoder-only models), not ${value.engine}`));
    }
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

/** bf16 runs on GPUs through the native engine: the CPU keeps fp32, and GreedySearch has no bfloat16. */
function checkBf16(definition: Definition<'model'>, device: string): Diagnostic[] {
  const value = definition.value;
  const onGpu = device !== 'cpu' || (value.instance_group ?? []).some((group) => group.kind === 'gpu');
  const out: Diagnostic[] = [];
  if (!onGpu) out.push(diagnosticAt(definition, ['dtype'], 'dtype bf16 runs on GPUs (device cuda or cuda:N); on the CPU models run in fp32: set dtype fp32 or device cuda'));
  if (value.native_engine === false) out.push(diagnosticAt(definition, ['native_engine'], 'dtype bf16 runs on the native engine; native_engine false needs dtype fp16 or fp32'));
  if (value.greedy_search === true) out.push(diagnosticAt(definition, ['greedy_search'], 'greedy_search needs dtype fp16 or fp32 (ONNX Runtime\'s GreedySearch has no bfloat16)'));
  if (value.weights === 'int8' || value.weights === 'int4') out.push(diagnosticAt(definition, ['weights'], `weights ${value.weights} needs dtype fp16 or fp32 (ONNX Runtime's MatMulNBits has no bfloat16)`));
  return out;
}
