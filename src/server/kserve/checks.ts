/**
 * The checks KServe v2 requests share over HTTP and gRPC: the version a request names, its tensors'
 * shapes against the model's, and a pipeline's request fields (given as tensors) against the bounds
 * the generate extension checks.
 */
import { Ajv } from 'ajv';
import { ChorusError, describe, invalidArgument } from '../../errors.ts';
import type { ModelInfo, Tensor } from '../../serving/index.ts';
import { PipelineFields } from '../schemas/generate.ts';
import { AJV_OPTIONS, validationError } from '../validation.ts';

/** The one version every model, ensemble and pipeline answers as. */
export const VERSION = '1';

/** A path's version, when it names one, must be the model's. */
export function checkVersion(info: ModelInfo, version: string | undefined): void {
  if (version !== undefined && version !== info.version) {
    throw new ChorusError('CHORUS_NOT_FOUND', `${info.name} has no version ${describe(version)}; its versions: ${info.version}`, { param: 'version', value: version });
  }
}

const checkPipelineFields = new Ajv(AJV_OPTIONS).compile(PipelineFields);

/** A tensor's shape against the one its model declares (-1: any size), with or without the batch dimension. */
export function checkShape(label: string, shape: number[], declared: number[]): void {
  const fits = (want: number[]): boolean => shape.length === want.length && shape.every((d, i) => want[i] === -1 || want[i] === d);
  if (!fits(declared) && !(declared.length > 1 && fits(declared.slice(1)))) {
    const without = declared.length > 1 ? ` or [${declared.slice(1).join(', ')}] without the batch dimension` : '';
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${label}.shape must be [${declared.join(', ')}]${without} (-1: any size), got [${shape.join(', ')}]`, { param: `${label}.shape` });
  }
}

/**
 * A pipeline's request fields given as tensors, checked as the generate extension checks them (the same
 * bounds and messages): each one-element tensor is its field's value.
 */
export function checkFields(inputs: Array<{ name: string; tensor: Tensor }>): void {
  const fields: Record<string, unknown> = {};
  for (const { name, tensor } of inputs) {
    const value = tensor.data[0];
    if (name === 'stream' && (tensor.data.length !== 1 || typeof value !== 'boolean')) throw invalidArgument('stream', 'one BOOL element, true or false', tensor.data.length === 1 ? value : tensor.data);
    if (name === 'text_input' || !(name in PipelineFields.properties) || tensor.data.length !== 1) continue;
    // A 64-bit integer (a seed) is checked where the pipeline takes it, exactly.
    if (typeof value === 'bigint') continue;
    fields[name] = value;
  }
  if (!checkPipelineFields(fields)) throw validationError(checkPipelineFields.errors ?? []);
}
