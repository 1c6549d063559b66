/**
 * What the gRPC service sees below it: the members of the engine client it calls, with the engine
 * client's signatures (names and their kinds, text generation, tensors in and out, model control), so
 * the service runs over the engine client itself unchanged. `serviceEngine` provides them over a
 * Service until the server as a whole sits on the engine client.
 */
import { defer, map, type Observable } from 'rxjs';
import type { Datatype } from '../../config/index.ts';
import type { TensorRecord } from '../../ensemble/index.ts';
import { ChorusError, invalidArgument } from '../../errors.ts';
import type { PipelineUpdate, Service, TextRequest } from '../../pipeline/index.ts';

/** What a name is: a text pipeline, a tensor-level ensemble, or a model of the store. */
export type ModelKind = 'pipeline' | 'ensemble' | 'model';

/** A tensor a name takes or gives (the batch dimension first, -1). */
export interface TensorInfo {
  name: string;
  datatype: Datatype;
  shape: number[];
  optional: boolean;
}

/** What the service says about a name. */
export interface ModelInfo {
  name: string;
  kind: ModelKind;
  version: string;
  platform: string;
  state: 'READY' | 'LOADING' | 'UNAVAILABLE';
  inputs: TensorInfo[];
  outputs: TensorInfo[];
  config: Record<string, unknown>;
}

/**
 * The engine client's members the gRPC service calls. `infer` on a pipeline takes `text_input` and
 * one-element request fields and gives snapshots of `text_output` (each choice's text so far), with
 * `prompt_tokens` and `completion_tokens` on the last.
 */
export interface GrpcEngine {
  models(kind?: ModelKind): ModelInfo[];
  resolve(name: string, kinds?: readonly ModelKind[]): ModelInfo;
  generate(pipeline: string, request: TextRequest): Observable<PipelineUpdate>;
  infer(name: string, inputs: TensorRecord, options?: { stream?: boolean }): Observable<TensorRecord>;
  load(model: string): Promise<void>;
  unload(model: string): Promise<void>;
}

const PIPELINE_INPUTS: TensorInfo[] = [{ name: 'text_input', datatype: 'BYTES', shape: [-1, 1], optional: false }];
const PIPELINE_OUTPUTS: TensorInfo[] = [
  { name: 'text_output', datatype: 'BYTES', shape: [-1, -1], optional: false },
  { name: 'prompt_tokens', datatype: 'INT32', shape: [-1, 1], optional: true },
  { name: 'completion_tokens', datatype: 'INT32', shape: [-1, 1], optional: true },
];

type Specs = Record<string, { datatype: Datatype; dims: number[]; optional?: boolean }>;
const infos = (specs: Specs | undefined): TensorInfo[] =>
  Object.entries(specs ?? {}).map(([name, spec]) => ({ name, datatype: spec.datatype, shape: [-1, ...spec.dims], optional: spec.optional === true }));

/** The GrpcEngine of a Service. */
export function serviceEngine(service: Service): GrpcEngine {
  const { repository, store } = service;
  const info = (name: string, kind: ModelKind): ModelInfo => {
    if (kind === 'pipeline') return { name, kind, version: '1', platform: 'pipeline', state: 'READY', inputs: PIPELINE_INPUTS, outputs: PIPELINE_OUTPUTS, config: { ...repository.pipelines.get(name)!.value } };
    if (kind === 'ensemble') {
      const value = repository.ensembles.get(name)!.value;
      return { name, kind, version: '1', platform: 'ensemble', state: 'READY', inputs: infos(value.inputs), outputs: infos(value.outputs), config: { ...value } };
    }
    const value = repository.models.get(name)!.value;
    const state = store.index().find((m) => m.name === name)?.state ?? 'UNAVAILABLE';
    return { name, kind, version: '1', platform: `chorus_${value.engine}`, state, inputs: infos(value.inputs as Specs | undefined), outputs: infos(value.outputs as Specs | undefined), config: { ...value } };
  };
  const names = (kind: ModelKind): string[] => [...(kind === 'pipeline' ? repository.pipelines : kind === 'ensemble' ? repository.ensembles : repository.models).keys()].sort();
  const models = (kind?: ModelKind): ModelInfo[] => (kind === undefined ? (['pipeline', 'ensemble', 'model'] as const) : [kind]).flatMap((k) => names(k).map((n) => info(n, k)));
  const resolve = (name: string, kinds: readonly ModelKind[] = ['pipeline', 'ensemble', 'model']): ModelInfo => {
    const kind = kinds.find((k) => names(k).includes(name));
    if (kind === undefined) throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; there are: ${[...new Set(kinds.flatMap(names))].sort().join(', ')}`, { param: 'model', value: name });
    return info(name, kind);
  };
  return {
    models,
    resolve,
    generate: (pipeline, request) => service.pipeline(pipeline).run(request),
    infer: (name, inputs, options = {}) => {
      const { kind } = resolve(name);
      if (kind === 'model') throw new ChorusError('CHORUS_UNSUPPORTED', `${name} is a model; infer runs ensembles and pipelines (a model runs inside an ensemble step)`, { param: 'model' });
      if (kind === 'ensemble') return service.ensemble(name).run(inputs, options);
      const { text_input: text, ...fields } = inputs;
      if (text === undefined || text.datatype !== 'BYTES' || text.data.length !== 1) throw invalidArgument('inputs.text_input', 'one BYTES element (the prompt)', text?.data);
      const request: TextRequest = { text_input: text.data[0] as string, stream: options.stream !== false };
      for (const [field, t] of Object.entries(fields)) {
        if (t.data.length !== 1) throw invalidArgument(`inputs.${field}`, 'one element (a request field of the pipeline)', t.data);
        request[field] = t.data[0];
      }
      return defer(() => {
        const texts: string[] = [];
        return service.pipeline(name).run(request).pipe(
          map((update) => {
            for (const choice of update.choices) texts[choice.index] = choice.text;
            return pipelineTensors(texts, update.usage);
          }),
        );
      });
    },
    load: (model) => store.load(model),
    unload: (model) => store.unload(model),
  };
}

/** A pipeline's texts so far as text_output [1, n], with the usage once it comes. */
function pipelineTensors(texts: readonly string[], usage: PipelineUpdate['usage']): TensorRecord {
  const out: TensorRecord = { text_output: { datatype: 'BYTES', shape: [1, texts.length], data: Array.from(texts, (t) => t ?? '') } };
  if (usage !== undefined) {
    out.prompt_tokens = { datatype: 'INT32', shape: [1, 1], data: [usage.promptTokens] };
    out.completion_tokens = { datatype: 'INT32', shape: [1, 1], data: [usage.completionTokens] };
  }
  return out;
}
