/**
 * script: a TS/JS module of the repository (Triton's Python backend) whose default export maps the
 * step's input tensors, by port, to its output tensors, by port (sync or async). Each output is checked
 * to be a well-formed tensor.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ChorusError } from '../../errors.ts';
import { tensor, type Tensor } from '../tensor.ts';
import { onFinalInputs, type TensorRecord } from './step.ts';

type ScriptFunction = (inputs: TensorRecord) => TensorRecord | Promise<TensorRecord>;

const modules = new Map<string, Promise<ScriptFunction>>();

function load(file: string): Promise<ScriptFunction> {
  let loading = modules.get(file);
  if (loading === undefined) {
    loading = import(pathToFileURL(file).href).then((module: { default?: unknown }) => {
      if (typeof module.default !== 'function') throw new ChorusError('CHORUS_CONFIG_INVALID', `script ${file} must export a function as its default export`);
      return module.default as ScriptFunction;
    });
    modules.set(file, loading);
  }
  return loading;
}

export const scriptStep = onFinalInputs(async (inputs, context) => {
  const run = await load(resolve(context.repositoryDir, context.target));
  const result = await run(inputs);
  const out: TensorRecord = {};
  for (const port of Object.keys(context.step.outputs)) {
    const value = result[port] as Tensor | undefined;
    if (value === undefined) throw new ChorusError('CHORUS_INTERNAL', `script ${context.target} returned no output ${port}`);
    out[port] = tensor(value.datatype, value.shape, value.data, `output ${port}`);
  }
  return out;
});
