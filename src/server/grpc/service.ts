/**
 * The handlers of inference.GRPCInferenceService over a GrpcEngine: health, metadata, configuration,
 * the repository, ModelInfer (a cancelled call cancels its generation), and ModelStreamInfer in
 * Triton's decoupled mode (stream-infer.ts).
 */
import type * as grpc from '@grpc/grpc-js';
import { last, type Subscription } from 'rxjs';
import type { GrpcEngine, ModelInfo, TensorInfo } from './engine.ts';
import type { Metrics } from '../metrics.ts';
import { VERSION } from '../kserve/checks.ts';
import { inferResponse, resolveNamed, startInfer, type InferRequest } from './infer-call.ts';
import { counted, grpcError, statusOf } from './status.ts';
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

/** The service's handlers by RPC name; with `metrics`, inference calls count as HTTP's do. */
export function inferenceHandlers(engine: GrpcEngine, metrics?: Metrics): grpc.UntypedServiceImplementation {
  const named = (r: Record<string, unknown>): ModelInfo => resolveNamed(engine, String(r.name ?? ''), String(r.version ?? ''), 'name');
  return {
    ServerLive: unary(() => ({ live: true })),
    ServerReady: unary(() => ({ ready: true })),
    ServerMetadata: unary(() => ({ name: 'chorus', version: '0.1.0', extensions: ['binary_tensor_data', 'model_repository', 'model_configuration', 'decoupled'] })),
    ModelReady: unary((r) => ({ ready: named(r).state === 'READY' })),
    ModelMetadata: unary((r) => {
      const info = named(r);
      return { name: info.name, versions: [VERSION], platform: info.platform, inputs: metadataTensors(info.inputs), outputs: metadataTensors(info.outputs) };
    }),
    ModelConfig: unary((r) => {
      const info = named(r);
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
      // Counted as HTTP's requests are, once the name is one the repository has.
      const end = counted(metrics, engine, call.request.model_name);
      const answer = (error: unknown, value?: unknown): void => {
        end?.(error === null ? 200 : statusOf(error));
        if (error === null) callback(null, value as object);
        else callback(grpcError(error));
      };
      try {
        const started = startInfer(engine, call.request, false);
        subscription = started.run.pipe(last()).subscribe({
          next: (outputs) => {
            try {
              answer(null, inferResponse(call.request, outputs, started.wanted(outputs)));
            } catch (error) {
              answer(error);
            }
          },
          error: (error: unknown) => answer(error),
        });
      } catch (error) {
        answer(error);
      }
      call.on('cancelled', () => subscription?.unsubscribe());
    },
    ModelStreamInfer: streamInfer(engine, metrics),
  };
}

