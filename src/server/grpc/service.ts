/**
 * The handlers of inference.GRPCInferenceService over a GrpcEngine: health, metadata, configuration,
 * the repository, ModelInfer (a cancelled call cancels its generation), and ModelStreamInfer in
 * Triton's decoupled mode (stream-infer.ts).
 */
import type * as grpc from '@grpc/grpc-js';
import { last, type Subscription } from 'rxjs';
import type { GrpcEngine, ModelInfo, TensorInfo } from './engine.ts';
import { inferResponse, startInfer, VERSION, type InferRequest } from './infer-call.ts';
import { grpcError } from './status.ts';
import { streamInfer } from './stream-infer.ts';


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
        const { run, wanted } = startInfer(engine, call.request, false);
        subscription = run.pipe(last()).subscribe({
          next: (outputs) => {
            try {
              callback(null, inferResponse(call.request, outputs, wanted(outputs)) as object);
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
    ModelStreamInfer: streamInfer(engine),
  };
}

