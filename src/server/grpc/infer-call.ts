/** One inference call over gRPC: the request resolved and started, and its outputs as a response message. */
import type { Observable } from 'rxjs';
import type { TensorRecord } from '../../serving/index.ts';
import { invalidArgument } from '../../errors.ts';
import type { GrpcEngine, ModelInfo } from './engine.ts';
import { requestTensors, responseTensors, type InputMessage } from './tensors.ts';

/** Every name has one version. */
export const VERSION = '1';

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
  /** The requested output names (all when none were named); throws naming one the answer lacks. */
  wanted: (outputs: TensorRecord) => string[];
}

/** Resolves the request's model and tensors and starts it (the observable is cold until subscribed). */
export function startInfer(engine: GrpcEngine, request: InferRequest, stream: boolean): InferCall {
  if (request.model_name === '') throw invalidArgument('model_name', 'the name of a pipeline or ensemble', request.model_name);
  const info = engine.resolve(request.model_name);
  const inputs = requestTensors(request.inputs, request.raw_input_contents);
  const run = engine.infer(info.name, inputs, { stream });
  const wanted = (outputs: TensorRecord): string[] => {
    const names = request.outputs.length > 0 ? request.outputs.map((o) => o.name) : Object.keys(outputs);
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
