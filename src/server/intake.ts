/**
 * Requests reach the engine client one per turn of the event loop. A wave of requests that arrive
 * together is read off its sockets in one go; taken in (prompt encoded, request submitted) in the same
 * go, the wave's intake ran before any engine message that came meanwhile, so that even its first
 * requests' first tokens waited for its last request (measured: TTFT min about its p50). Paced, each
 * turn takes in one request and then the engine's messages and the streams' writes that are due, so a
 * request's first token goes out as soon as it comes, and the wave's intake is spread over the turns.
 * CHORUS_INTAKE_PACING=0 (read by buildServer): unpaced, to compare.
 */
import { defer, from, switchMap, type Observable } from 'rxjs';
import type { EngineClient } from '../serving/index.ts';

const waiting: Array<() => void> = [];
let scheduled = false;

function next(): void {
  scheduled = false;
  waiting.shift()?.();
  if (waiting.length > 0 && !scheduled) {
    scheduled = true;
    setImmediate(next);
  }
}

/** Resolves in a later turn of the event loop: one waiter a turn, in the order they asked. */
export function intakeTurn(): Promise<void> {
  return new Promise<void>((resolve) => {
    waiting.push(resolve);
    if (!scheduled) {
      scheduled = true;
      setImmediate(next);
    }
  });
}

/** `run()`'s observable, subscribed at the subscriber's intake turn (not at all when it leaves first). */
export function paced<T>(run: () => Observable<T>): Observable<T> {
  return defer(() => from(intakeTurn()).pipe(switchMap(run)));
}

/** `client` with its text and tensor requests paced. */
export function pacedClient(client: EngineClient): EngineClient {
  return {
    models: (kind) => client.models(kind),
    resolve: (name, kinds) => client.resolve(name, kinds),
    generate: (pipeline, request) => paced(() => client.generate(pipeline, request)),
    infer: (name, inputs, options) => paced(() => client.infer(name, inputs, options)),
    load: (model) => client.load(model),
    unload: (model) => client.unload(model),
    reload: (model) => client.reload(model),
    randomWeights: (name) => client.randomWeights(name),
    tokenizers: () => client.tokenizers(),
    stats: () => client.stats(),
    get requestsDone() {
      return client.requestsDone;
    },
    get source() {
      return client.source;
    },
    close: () => client.close(),
  };
}
