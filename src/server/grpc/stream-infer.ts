/**
 * ModelStreamInfer as Triton's decoupled mode. Each request on the stream runs on its own and answers
 * with responses as it goes: for a pipeline, one per update with that step's text in `text_output`
 * (joined, they are the answer); for an ensemble, each snapshot of its outputs (FT's partial results).
 * Every response carries `triton_final_response`; the last one of a request is marked true. With the
 * request parameter `triton_enable_empty_final_response` true, responses go out as they come and an
 * empty one marked true ends the request (Triton's option); otherwise each response waits for the next
 * so the last can be marked. A failing request answers `error_message` and the stream goes on. The
 * stream ends when the client has ended its side and every request is done; a cancelled call cancels
 * every request on it, down to the engine.
 */
import type * as grpc from '@grpc/grpc-js';
import { Subscription } from 'rxjs';
import type { TensorRecord } from '../../serving/index.ts';
import type { GrpcEngine } from './engine.ts';
import { VERSION } from '../kserve/checks.ts';
import { inferResponse, startInfer, type InferCall, type InferRequest } from './infer-call.ts';
import type { Metrics } from '../metrics.ts';
import { counted, grpcError, statusOf } from './status.ts';

export function streamInfer(engine: GrpcEngine, metrics?: Metrics): (call: grpc.ServerDuplexStream<InferRequest, unknown>) => void {
  return (call) => {
    const running = new Set<Subscription>();
    let ended = false;
    const settle = (): void => {
      if (ended && running.size === 0) call.end();
    };
    const fail = (request: InferRequest, error: unknown): void => {
      call.write({ error_message: grpcError(error).details, infer_response: { model_name: request.model_name, model_version: VERSION, id: request.id } });
    };
    call.on('data', (request: InferRequest) => {
      const end = counted(metrics, engine, request.model_name);
      let started: InferCall;
      try {
        started = startInfer(engine, request, true);
      } catch (error) {
        end?.(statusOf(error));
        fail(request, error);
        return;
      }
      const { info, run, wanted } = started;
      const emptyFinal = request.parameters.triton_enable_empty_final_response?.bool_param === true;
      const sent: string[] = [];
      let held: { outputs: TensorRecord; whole: TensorRecord } | undefined;
      const send = (final: boolean): void => {
        // Each response holds the outputs asked for that it has; the last must have them all.
        if (held !== undefined) call.write({ infer_response: inferResponse(request, held.outputs, wanted(held.whole, final), final) });
        held = undefined;
      };
      const subscription = new Subscription();
      running.add(subscription);
      let status = 200;
      const done = (): void => {
        running.delete(subscription);
        end?.(status);
        settle();
      };
      subscription.add(
        run.subscribe({
          next: (outputs) => {
            try {
              send(false);
              held = { outputs: info.kind === 'pipeline' ? deltas(outputs, sent) : outputs, whole: outputs };
              if (emptyFinal) send(false);
            } catch (error) {
              subscription.unsubscribe();
              status = statusOf(error);
              fail(request, error);
              done();
            }
          },
          error: (error: unknown) => {
            try {
              send(false);
            } catch {
              // The request failed: its error is what the client hears.
            }
            status = statusOf(error);
            fail(request, error);
            done();
          },
          complete: () => {
            try {
              if (held === undefined) call.write({ infer_response: { model_name: request.model_name, model_version: VERSION, id: request.id, parameters: { triton_final_response: { bool_param: true } } } });
              else send(true);
            } catch (error) {
              status = statusOf(error);
              fail(request, error);
            }
            done();
          },
        }),
      );
    });
    call.on('end', () => {
      ended = true;
      settle();
    });
    call.on('cancelled', () => {
      for (const subscription of running) subscription.unsubscribe();
      running.clear();
    });
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
