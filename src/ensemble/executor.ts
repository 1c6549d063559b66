/**
 * The ensemble executor: a validated ensemble compiled into an RxJS graph. Each step is an operator from
 * its input snapshots to its output snapshots. A tensor's stream emits snapshots, the last one final: a
 * plain step emits once; `generate` emits its outputs as they grow, and `detokenize` turns each growth
 * into text, so streams flow through the whole graph. A step runs once its inputs are complete (or, if
 * it streams, as they come); independent steps run concurrently; a step runs only if an output needs
 * it. Inputs from one producer arrive together, so a step never sees one tensor of a snapshot without
 * its siblings. Unsubscribing from the result unsubscribes every step, which cancels generation.
 */
import type { Observable} from 'rxjs';
import { combineLatest, defer, EMPTY, map, merge, of, scan, shareReplay, catchError, throwError } from 'rxjs';
import type { EnsembleDefinition, StepDefinition, StepKind, TensorSpec } from '../config/index.ts';
import { STEP_KINDS } from '../config/index.ts';
import { ChorusError } from '../errors.ts';
import type { ModelStore } from './model-store.ts';
import { detokenizeStep } from './steps/detokenize.ts';
import { encodeStep } from './steps/encode.ts';
import { forwardStep } from './steps/forward.ts';
import { generateStep } from './steps/generate.ts';
import { scriptStep } from './steps/script.ts';
import type { StepContext, StepImpl, TensorRecord } from './steps/step.ts';
import { tokenizeStep } from './steps/tokenize.ts';
import { elementCount, type Tensor } from './tensor.ts';

const IMPLEMENTATIONS: Record<StepKind, StepImpl | undefined> = {
  tokenize: tokenizeStep,
  generate: generateStep,
  detokenize: detokenizeStep,
  encode: encodeStep,
  script: scriptStep,
  forward: forwardStep,
};

/** Where a tensor comes from: a producer's snapshot stream and the port to read in it. */
interface Wire {
  source: Observable<TensorRecord>;
  port: string;
}

export class CompiledEnsemble {
  private readonly order: StepDefinition[];

  constructor(
    readonly name: string,
    readonly definition: EnsembleDefinition,
    private readonly store: ModelStore,
  ) {
    this.order = topologicalOrder(definition.steps);
    for (const step of definition.steps) {
      const kind = stepKind(step);
      if (IMPLEMENTATIONS[kind] === undefined) throw new ChorusError('CHORUS_UNSUPPORTED', `ensemble ${name}, step ${step.name}: ${kind} steps are not supported yet`);
    }
  }

  /**
   * Runs the ensemble on `inputs`; emits snapshots of its outputs, the last one complete. With `stream:
   * false` the caller reads only the last snapshot, so generate steps may produce their tokens at once.
   */
  run(inputs: Record<string, Tensor>, options: { stream?: boolean } = {}): Observable<TensorRecord> {
    return defer(() => {
      this.checkInputs(inputs);
      const wires = new Map<string, Wire>();
      for (const [name, value] of Object.entries(inputs)) wires.set(name, { source: of({ [name]: value }), port: name });
      for (const step of this.order) {
        const kind = stepKind(step);
        const context: StepContext = { store: this.store, step, target: String(step[kind]), repositoryDir: this.store.repository.dir, stream: options.stream !== false };
        const output = IMPLEMENTATIONS[kind]!(this.stepInputs(step, wires), context).pipe(
          catchError((error: unknown) => throwError(() => inStep(error, step.name))),
          shareReplay({ bufferSize: 1, refCount: true }),
        );
        for (const [port, tensorName] of Object.entries(step.outputs)) wires.set(tensorName, { source: output, port });
      }
      // Outputs made by one step arrive together, so a snapshot never mixes two of its emissions.
      const outputs = byProducer(Object.entries(this.definition.outputs).map(([name, spec]) => [name, spec.tensor ?? name]), wires);
      if (outputs.length === 0) return EMPTY;
      return merge(...outputs).pipe(scan((all, part) => ({ ...all, ...this.declared(part) }), {} as TensorRecord));
    });
  }

  /**
   * Outputs under their declared datatypes: a step port that accepts another datatype (ids made INT32,
   * declared UINT32) hands its values on unchanged under the declared one.
   */
  private declared(part: TensorRecord): TensorRecord {
    const out: TensorRecord = {};
    for (const [name, t] of Object.entries(part)) {
      const datatype = this.definition.outputs[name]?.datatype ?? t.datatype;
      out[name] = datatype === t.datatype ? t : { ...t, datatype };
    }
    return out;
  }

  /** A step's inputs as consistent snapshots: the ports fed by one producer arrive together. */
  private stepInputs(step: StepDefinition, wires: Map<string, Wire>): Observable<TensorRecord> {
    // An optional ensemble input the request left out has no wire: its port is simply absent.
    const streams = byProducer(Object.entries(step.inputs), wires);
    if (streams.length === 0) return of({});
    return combineLatest(streams).pipe(map((parts) => Object.assign({}, ...parts) as TensorRecord));
  }

  /** Every required input given, nothing unknown, datatypes and shapes as declared. */
  checkInputs(inputs: Record<string, Tensor>): void {
    const specs = this.definition.inputs;
    for (const name of Object.keys(inputs)) {
      if (!(name in specs)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `ensemble ${this.name} has no input ${name}; its inputs are: ${Object.keys(specs).join(', ')}`, { param: name });
    }
    for (const [name, spec] of Object.entries(specs)) {
      const value = inputs[name];
      if (value === undefined) {
        if (!spec.optional) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name} is required by ensemble ${this.name}`, { param: name });
        continue;
      }
      checkTensor(name, value, spec);
    }
  }
}

/**
 * For `[name, tensor]` pairs, one stream per producer of those tensors, each emission holding the
 * producer's tensors under their names: what one producer makes arrives together. Tensors without a
 * wire are left out.
 */
function byProducer(pairs: ReadonlyArray<readonly [string, string]>, wires: ReadonlyMap<string, Wire>): Array<Observable<TensorRecord>> {
  const groups = new Map<Observable<TensorRecord>, Array<[string, string]>>();
  for (const [name, tensorName] of pairs) {
    const wire = wires.get(tensorName);
    if (wire === undefined) continue;
    groups.set(wire.source, [...(groups.get(wire.source) ?? []), [name, wire.port]]);
  }
  return [...groups].map(([source, names]) =>
    source.pipe(map((record) => Object.fromEntries(names.flatMap(([name, port]) => (record[port] === undefined ? [] : [[name, record[port]]]))) as TensorRecord)),
  );
}

function checkTensor(name: string, value: Tensor, spec: TensorSpec): void {
  if (value.datatype !== spec.datatype) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name} must be ${spec.datatype}, got ${value.datatype}`, { param: name });
  const shape = value.shape;
  const fits = shape.length === spec.dims.length + 1 && spec.dims.every((d, i) => d === -1 || d === shape[i + 1]);
  if (!fits) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name} must have shape [batch, ${spec.dims.map((d) => (d === -1 ? '*' : d)).join(', ')}], got [${shape.join(', ')}]`, { param: name });
  }
  if (value.data.length !== elementCount(shape)) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `input ${name} has ${value.data.length} elements, but its shape [${shape.join(', ')}] holds ${elementCount(shape)}`, { param: name });
  }
}

/** The one kind a (validated) step names. */
export function stepKind(step: StepDefinition): StepKind {
  return STEP_KINDS.find((kind) => step[kind] !== undefined)!;
}

/** Steps ordered so each comes after the producers of its inputs (Kahn's algorithm; the graph is acyclic). */
function topologicalOrder(steps: readonly StepDefinition[]): StepDefinition[] {
  const producer = new Map<string, number>();
  steps.forEach((step, i) => Object.values(step.outputs).forEach((tensor) => producer.set(tensor, i)));
  const needs = steps.map((step) => new Set(Object.values(step.inputs).flatMap((t) => (producer.has(t) ? [producer.get(t)!] : []))));
  const order: StepDefinition[] = [];
  const done = new Set<number>();
  while (order.length < steps.length) {
    const next = steps.findIndex((_, i) => !done.has(i) && [...needs[i]!].every((n) => done.has(n)));
    if (next < 0) throw new ChorusError('CHORUS_CONFIG_INVALID', `steps form a cycle among: ${steps.filter((_, i) => !done.has(i)).map((s) => s.name).join(', ')}`);
    done.add(next);
    order.push(steps[next]!);
  }
  return order;
}

/** The error, its message prefixed with the step's name (and the step kept on it). */
export function inStep(error: unknown, step: string): ChorusError {
  if (error instanceof ChorusError) {
    if (error.step !== undefined) return error;
    return new ChorusError(error.code, `step ${step}: ${error.message}`, { param: error.param, value: error.value, cause: error, step });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ChorusError('CHORUS_INTERNAL', `step ${step}: ${message}`, { cause: error, step });
}
