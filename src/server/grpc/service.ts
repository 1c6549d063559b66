/**
 * The handlers of inference.GRPCInferenceService over a GrpcEngine: health, metadata, configuration,
 * the repository, ModelInfer, and ModelStreamInfer in Triton's decoupled mode: for a pipeline one
 * response per update with that step's text in `text_output`, for an ensemble each snapshot of its
 * outputs (FT's partial results), every response marked `triton_final_response: false`, then an empty
 * response marked true when the request is done. A request's failure on the stream is a response with
 * `error_message`; the stream stays open for the others. A cancelled call cancels its generation.
 */
import type * as grpc from '@grpc/grpc-js';
import { last, Subscription, type Observable } from 'rxjs';
import type { TensorRecord } from '../../ensemble/index.ts';
import { invalidArgument } from '../../errors.ts';
import type { GrpcEngine, ModelInfo, TensorInfo } from './engine.ts';
import { grpcError } from './status.ts';
import { requestTensors, responseTensors, type InputMessage } from './tensors.ts';

const VERSION = '1';

/** ModelInferRequest, as the proto loader gives it. */
interface InferRequest {
  model_name: string;
  model_version: string;
  id: string;
  inputs: InputMessage[];
  outputs: Array<{ name: string }>;
  raw_input_contents: Buffer[];
}

type Unary = (call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>, callback: grpc.sendUnaryData<unknown>) => void;

/** A unary handler from an async function; a thrown error answers with its gRPC status. */
function unary(run: (request: Record<string, unknown>, call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>) => unknown): Unary {
  return (call, callback) => {
    Promise.resolve()
      .then(() => run(call.request, call))
      .then((value) => callback(null, value as object), (error: unknown) => callback(grpcError(error)));
  };
}

const DATA_TYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES', 'BF16'];
const dataType = (datatype: string): string => (datatype === 'BYTES' ? 'TYPE_STRING' : DATA_TYPES.includes(datatype) ? `TYPE_${datatype}` : 'TYPE_INVALID');
const metadataTensors = (tensors: TensorInfo[]): unknown[] => tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape }));

/** Whether a name streams token by token: a pipeline, or an ensemble with a generate step. */
function decoupled(info: ModelInfo): boolean {
  if (info.kind === 'pipeline') return true;
  const steps = info.config.steps;
  return info.kind === 'ensemble' && Array.isArray(steps) && steps.some((s: { generate?: unknown }) => s.generate !== undefined);
}

/** The service's handlers by RPC name. */
export function inferenceHandlers(engine: GrpcEngine): grpc.UntypedServiceImplementation {
  const infer = (request: InferRequest, stream: boolean): { info: ModelInfo; run: Observable<TensorRecord>; wanted: (outputs: TensorRecord) => string[] } => {
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
  };
  const response = (request: InferRequest, outputs: TensorRecord, names: readonly string[], final?: boolean): unknown => {
    const { outputs: described, raw } = responseTensors(outputs, names);
    return {
      model_name: request.model_name,
      model_version: VERSION,
      id: request.id,
      outputs: described,
      raw_output_contents: raw,
      ...(final === undefined ? {} : { parameters: { triton_final_response: { bool_param: final } } }),
    };
  };

  return {
    ServerLive: unary(() => ({ live: true })),
    ServerReady: unary(() => ({ ready: true })),
    ServerMetadata: unary(() => ({ name: 'chorus', version: '0.1.0', extensions: ['binary_tensor_data', 'model_repository', 'model_configuration', 'decoupled'] })),
    ModelReady: unary((r) => ({ ready: engine.resolve(String(r.name)).state === 'READY' })),
    ModelMetadata: unary((r) => {
      const info = engine.resolve(String(r.name));
      return { name: info.name, versions: [VERSION], platform: info.platform, inputs: metadataTensors(info.inputs), outputs: metadataTensors(info.outputs) };
    }),
    ModelConfig: unary((r) => {
      const info = engine.resolve(String(r.name));
      const maxBatch = typeof info.config.max_batch_size === 'number' ? info.config.max_batch_size : 0;
      const description = typeof info.config.description === 'string' ? { description: { string_value: info.config.description } } : {};
      return {
        config: {
          name: info.name,
          platform: info.platform,
          backend: 'chorus',
          max_batch_size: maxBatch,
          input: info.inputs.map((t) => ({ name: t.name, data_type: dataType(t.datatype), dims: t.shape.slice(1), optional: t.optional })),
          output: info.outputs.map((t) => ({ name: t.name, data_type: dataType(t.datatype), dims: t.shape.slice(1) })),
          parameters: { kind: { string_value: info.kind }, ...description },
          model_transaction_policy: { decoupled: decoupled(info) },
        },
      };
    }),
    RepositoryIndex: unary((r) => ({
      models: engine
        .models('model')
        .filter((m) => r.ready !== true || m.state === 'READY')
        .map((m) => ({ name: m.name, version: VERSION, state: m.state, reason: m.state === 'UNAVAILABLE' ? 'not loaded' : '' })),
    })),
    RepositoryModelLoad: unary(async (r) => {
      await engine.load(String(r.model_name));
      return {};
    }),
    RepositoryModelUnload: unary(async (r) => {
      await engine.unload(String(r.model_name));
      return {};
    }),
    ModelInfer: (call: grpc.ServerUnaryCall<InferRequest, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      let subscription: Subscription | undefined;
      try {
        const { run, wanted } = infer(call.request, false);
        subscription = run.pipe(last()).subscribe({
          next: (outputs) => {
            try {
              callback(null, response(call.request, outputs, wanted(outputs)) as object);
            } catch (error) {
              callback(grpcError(error));
            }
          },
          error: (error: unknown) => callback(grpcError(error)),
        });
      } catch (error) {
        callback(grpcError(error));
      }
      call.on('cancelled', () => subscription?.unsubscribe());
    },
    ModelStreamInfer: (call: grpc.ServerDuplexStream<InferRequest, unknown>) => {
      const running = new Set<Subscription>();
      let ended = false;
      const settle = (): void => {
        if (ended && running.size === 0) call.end();
      };
      const fail = (request: InferRequest, error: unknown): void => {
        call.write({ error_message: grpcError(error).details, infer_response: { model_name: request.model_name, model_version: VERSION, id: request.id } });
      };
      call.on('data', (request: InferRequest) => {
        let started: ReturnType<typeof infer>;
        try {
          started = infer(request, true);
        } catch (error) {
          fail(request, error);
          return;
        }
        const { info, run, wanted } = started;
        const sent: string[] = [];
        const subscription = new Subscription();
        running.add(subscription);
        subscription.add(run.subscribe({
          next: (outputs) => {
            try {
              call.write({ infer_response: response(request, info.kind === 'pipeline' ? deltas(outputs, sent) : outputs, wanted(outputs), false) });
            } catch (error) {
              subscription.unsubscribe();
              fail(request, error);
              done();
            }
          },
          error: (error: unknown) => {
            fail(request, error);
            done();
          },
          complete: () => {
            call.write({ infer_response: { model_name: request.model_name, model_version: VERSION, id: request.id, parameters: { triton_final_response: { bool_param: true } } } });
            done();
          },
        }));
        function done(): void {
          running.delete(subscription);
          settle();
        }
      });
      call.on('end', () => {
        ended = true;
        settle();
      });
      call.on('cancelled', () => {
        for (const subscription of running) subscription.unsubscribe();
        running.clear();
      });
    },
  };
}

/** A pipeline snapshot with text_output cut to what each choice added since the last one sent. */
function deltas(outputs: TensorRecord, sent: string[]): TensorRecord {
  const text = outputs.text_output;
  if (text === undefined) return outputs;
  const data = (text.data as string[]).map((snapshot, i) => {
    const delta = snapshot.slice((sent[i] ?? '').length);
    sent[i] = snapshot;
    return delta;
  });
  return { ...outputs, text_output: { ...text, data } };
}
