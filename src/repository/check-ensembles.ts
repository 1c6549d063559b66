/**
 * Ensemble graph rules: each step names one kind and an existing definition of it; ports exist and
 * required ones are fed; every tensor a step reads is an ensemble input or some step's output, made
 * once; datatypes agree along each edge; every ensemble output is made; the steps form no cycle.
 */
import { existsSync } from 'node:fs';
import { isAbsolute, relative, resolve } from 'node:path';
import type { Diagnostic } from '../config/diagnostic.ts';
import type { Datatype } from '../config/datatypes.ts';
import { STEP_KINDS, type StepDefinition, type StepKind } from '../config/schemas.ts';
import { compatible, STEP_PORTS } from '../config/step-ports.ts';
import { checkReference } from './references.ts';
import { diagnosticAt, type Definition, type Repository } from './repository.ts';

/** Who makes a tensor: an ensemble input or a step's output port. */
interface Producer {
  step: number | undefined;
  datatype: Datatype | undefined;
  /** Other datatypes the producer's port may be taken as. */
  accepts?: readonly Datatype[];
  what: string;
}

/** Diagnostics for every ensemble definition. */
export function checkEnsembles(repository: Repository): Diagnostic[] {
  return [...repository.ensembles.values()].flatMap((definition) => checkEnsemble(repository, definition));
}

function checkEnsemble(repository: Repository, definition: Definition<'ensemble'>): Diagnostic[] {
  const out: Diagnostic[] = [];
  const { steps, inputs, outputs } = definition.value;
  const at = (path: Array<string | number>, message: string, key = false): void => {
    out.push(diagnosticAt(definition, path, message, { key }));
  };

  const kinds = steps.map((step, index) => stepKind(step, index, at));
  const producers = new Map<string, Producer>();
  for (const [name, spec] of Object.entries(inputs)) producers.set(name, { step: undefined, datatype: spec.datatype, what: `ensemble input ${name}` });

  const names = new Map<string, number>();
  steps.forEach((step, index) => {
    const twin = names.get(step.name);
    if (twin !== undefined) at(['steps', index, 'name'], `step name "${step.name}" is already used by steps[${twin}]`);
    names.set(step.name, index);
    const kind = kinds[index];
    if (kind !== undefined) checkTarget(repository, definition, step, index, kind, out);
    for (const [port, tensor] of Object.entries(step.outputs)) {
      const previous = producers.get(tensor);
      if (previous !== undefined) {
        at(['steps', index, 'outputs', port], `tensor ${tensor} is already made by ${previous.what}; each tensor has one producer`);
        continue;
      }
      const spec = kind === undefined ? undefined : STEP_PORTS[kind].outputs?.[port];
      producers.set(tensor, { step: index, datatype: spec?.datatype, accepts: spec?.accepts, what: `step ${step.name} (output ${port})` });
    }
  });

  const consumed = new Set<string>();
  const edges: Array<Set<number>> = steps.map(() => new Set());
  steps.forEach((step, index) => {
    const kind = kinds[index];
    const ports = kind === undefined ? undefined : STEP_PORTS[kind];
    for (const [direction, map] of [['inputs', step.inputs], ['outputs', step.outputs]] as const) {
      const known = ports?.[direction];
      if (known === undefined) continue;
      for (const port of Object.keys(map)) {
        if (!(port in known)) at(['steps', index, direction, port], `${kind} steps have no ${direction.slice(0, -1)} "${port}"; expected one of: ${Object.keys(known).join(', ')}`, true);
      }
    }
    for (const [port, spec] of Object.entries(ports?.inputs ?? {})) {
      if (spec.required && !(port in step.inputs)) at(['steps', index, 'inputs'], `step ${step.name} needs input "${port}", but nothing feeds it`);
    }
    for (const [port, tensor] of Object.entries(step.inputs)) {
      consumed.add(tensor);
      const producer = producers.get(tensor);
      if (producer === undefined) {
        at(['steps', index, 'inputs', port], `unknown tensor ${tensor}: it is neither an ensemble input nor an output of any step`);
        continue;
      }
      if (producer.step !== undefined) edges[producer.step]!.add(index);
      const expected = ports?.inputs?.[port];
      if (expected !== undefined && producer.datatype !== undefined && !compatible(expected, { datatype: producer.datatype, accepts: producer.accepts })) {
        at(['steps', index, 'inputs', port], `datatype mismatch: input ${port} of step ${step.name} takes ${expected.datatype}, but ${producer.what} is ${producer.datatype}`);
      }
    }
  });

  for (const [name, spec] of Object.entries(outputs)) {
    const tensor = spec.tensor ?? name;
    const producer = producers.get(tensor);
    if (producer === undefined || producer.step === undefined) {
      at(spec.tensor === undefined ? ['outputs', name] : ['outputs', name, 'tensor'], `ensemble output ${name} ${spec.tensor === undefined ? 'is' : `returns tensor ${tensor}, which is`} not made by any step`, spec.tensor === undefined);
    } else if (producer.datatype !== undefined && !compatible({ datatype: producer.datatype, accepts: producer.accepts }, spec)) {
      at(['outputs', name, 'datatype'], `datatype mismatch: output ${name} is declared ${spec.datatype}, but ${producer.what} is ${producer.datatype}`);
    }
  }
  for (const name of Object.keys(inputs)) {
    if (!consumed.has(name)) out.push(diagnosticAt(definition, ['inputs', name], `ensemble input ${name} feeds no step`, { key: true, severity: 'warning' }));
  }
  const cycle = findCycle(edges);
  if (cycle !== undefined) {
    const path = [...cycle, cycle[0]!].map((i) => steps[i]!.name).join(' -> ');
    at(['steps', cycle[0]!], `steps form a cycle: ${path}`);
  }
  return out;
}

function stepKind(step: StepDefinition, index: number, at: (path: Array<string | number>, message: string) => void): StepKind | undefined {
  const named = STEP_KINDS.filter((kind) => step[kind] !== undefined);
  if (named.length === 1) return named[0];
  if (named.length === 0) at(['steps', index], `step ${step.name} names no kind; give one of: ${STEP_KINDS.join(', ')}`);
  else at(['steps', index, named[1]!], `step ${step.name} names ${named.join(' and ')}; a step has exactly one kind`);
  return undefined;
}

/** The step's tokenizer, model (of the right engine) or script file must exist. */
function checkTarget(repository: Repository, definition: Definition<'ensemble'>, step: StepDefinition, index: number, kind: StepKind, out: Diagnostic[]): void {
  const target = step[kind]!;
  const path = ['steps', index, kind];
  if (kind === 'tokenize' || kind === 'detokenize') {
    out.push(...checkReference(repository, definition, path, 'tokenizer', target));
  } else if (kind === 'script') {
    const file = resolve(repository.dir, target);
    // A script is part of the repository: a path outside it would run whatever file the machine has there.
    if (isAbsolute(target) || relative(resolve(repository.dir), file).startsWith('..')) {
      out.push(diagnosticAt(definition, path, `script must be a path inside the repository, relative to it; got ${target}`));
    } else if (!existsSync(file)) out.push(diagnosticAt(definition, path, `script ${file} does not exist`));
  } else {
    out.push(...checkReference(repository, definition, path, 'model', target));
    const model = repository.models.get(target);
    if (model !== undefined && model.value.engine !== kind) {
      out.push(diagnosticAt(definition, path, `model ${target} has engine ${model.value.engine}, so a ${kind} step cannot run it`));
    }
  }
}

/** One cycle of step indices in the dependency graph, if any (depth-first, three colours). */
function findCycle(edges: ReadonlyArray<ReadonlySet<number>>): number[] | undefined {
  const state = new Uint8Array(edges.length); // 0 new, 1 on stack, 2 done
  const stack: number[] = [];
  const visit = (node: number): number[] | undefined => {
    state[node] = 1;
    stack.push(node);
    for (const next of edges[node]!) {
      if (state[next] === 1) return stack.slice(stack.indexOf(next));
      if (state[next] === 0) {
        const found = visit(next);
        if (found !== undefined) return found;
      }
    }
    stack.pop();
    state[node] = 2;
    return undefined;
  };
  for (let node = 0; node < edges.length; node++) {
    if (state[node] === 0) {
      const found = visit(node);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}
