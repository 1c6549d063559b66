/** What every step implementation is: input snapshots in, output snapshots out. */
import { from, last, switchMap, type Observable, type ObservableInput } from 'rxjs';
import type { StepDefinition } from '../../config/index.ts';
import type { ModelStore } from '../model-store.ts';
import type { Tensor } from '../tensor.ts';

/** Tensors by port (or by name). */
export type TensorRecord = Record<string, Tensor>;

export interface StepContext {
  store: ModelStore;
  step: StepDefinition;
  /** What the step's kind names: a tokenizer, a model, or a script path. */
  target: string;
  repositoryDir: string;
  /** Whether the caller reads the outputs as they grow (false: only the final ones). */
  stream: boolean;
}

/**
 * A step: from its inputs' snapshots (each emission holds every port fed so far; the stream completes
 * when they are final) to its outputs' snapshots, the last one final.
 */
export type StepImpl = (inputs: Observable<TensorRecord>, context: StepContext) => Observable<TensorRecord>;

/** A step that runs once, on its final inputs. */
export function onFinalInputs(run: (inputs: TensorRecord, context: StepContext) => ObservableInput<TensorRecord>): StepImpl {
  return (inputs, context) => inputs.pipe(last(), switchMap((final) => from(run(final, context))));
}
