/** One inference call over gRPC: the request resolved and started, and its outputs as a response message. */
import type { Observable } from 'rxjs';
import type { TensorRecord } from '../../serving/index.ts';
import { invalidArgument } from '../../errors.ts';
import { checkVersion, VERSION } from '../kserve/checks.ts';
import type { GrpcEngine, ModelInfo } from './engine.ts';
import { requestTensors, responseTensors, type InputMessage } from './tensors.ts';

/** ModelInferRequest, as the proto loader gives it. */
export interface InferRequest {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Record<string, { bool_param?: boolean } | undefined>;
  inputs: InputMessage[];
  outputs: Array<{ name: string }>;
  raw_input_contents: Buffer[];
}

/** A started call: what it runs, its outputs as they come, and the outputs it asked for. */
export interface InferCall {
  info: ModelInfo;
  run: Observable<TensorRecord>;
  /**
   * The requested output names (all when none were named) that `outputs` holds. A partial answer (a
   * stream's) may lack some (a pipeline's token counts come with its last); a final one that lacks one
   * throws naming it.
   */
  wanted: (outputs: TensorRecord, final?: boolean) => string[];
}

/** A name (and version) as a GetModel-style request gives them, resolved: HTTP's rules, gRPC's field names. */
export function resolveNamed(engine: GrpcEngine, name: string, version: string, field: string): ModelInfo {
  if (name === '') throw invalidArgument(field, 'the name of a pipeline, ensemble or model', name);
  const info = engine.resolve(name);
  // An empty version is the latest, as Triton takes it.
  checkVersion(info, version === '' ? undefined : version);
  return info;
}

/** Resolves the request's model and tensors and starts it (the observable is cold until subscribed). */
export function startInfer(engine: GrpcEngine, request: InferRequest, stream: boolean): InferCall {
  const info = resolveNamed(engine, request.model_name, request.model_version, 'model_name');
  const declared = new Set(info.outputs.map((t) => t.name));
  for (const { name } of request.outputs) {
    if (declared.size > 0 && !declared.has(name)) throw invalidArgument('outputs', `names of outputs of ${info.name} (${[...declared].join(', ')})`, name);
  }
  const inputs = requestTensors(request.inputs, request.raw_input_contents, info);
  const run = engine.infer(info.name, inputs, { stream });
  const wanted = (outputs: TensorRecord, final = true): string[] => {
    const names = request.outputs.length > 0 ? request.outputs.map((o) => o.name) : Object.keys(outputs);
    if (!final) return names.filter((name) => name in outputs);
    for (const name of names) if (!(name in outputs)) throw invalidArgument('outputs', `names of outputs of ${info.name} (${Object.keys(outputs).join(', ')})`, name);
    return names;
  };
  return { info, run, wanted };
}

/** ModelInferResponse for outputs, in raw_output_contents; with `final`, marked triton_final_response. */
export function inferResponse(request: InferRequest, outputs: TensorRecord, names: readonly string[], final?: boolean): Record<string, unknown> {
  const { outputs: described, raw } = responseTensors(outputs, names);
  return {
    model_name: request.model_name,
    model_version: VERSION,
    id: request.id,
    outputs: described,
    raw_output_contents: raw,
    ...(final === undefined ? {} : { parameters: { triton_final_response: { bool_param: final } } }),
  };
}
