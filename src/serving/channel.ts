/**
 * Calls and streams between two threads over a MessagePort, the same on both ends: `call` asks the
 * other end to run a handler and answers its promise; `subscribe` runs one of the other end's
 * observables, unsubscribing there when this end unsubscribes; `push` sends a one-way value. What one
 * turn of the event loop sends goes in one message (an engine step's updates for every stream of a
 * thread: one postMessage, not one a token). Errors cross as ChorusErrors (code, message, param, value,
 * step) or as plain errors with their message.
 */
import type { MessagePort } from 'node:worker_threads';
import { Observable, type Subscription } from 'rxjs';
import { ChorusError, type ErrorCode } from '../errors.ts';

type Message =
  | { t: 'call'; id: number; op: string; args: unknown[] }
  | { t: 'ret'; id: number; value: unknown }
  | { t: 'fail'; id: number; error: WireError }
  | { t: 'sub'; id: number; op: string; args: unknown[] }
  | { t: 'next'; id: number; value: unknown }
  | { t: 'done'; id: number }
  | { t: 'unsub'; id: number }
  | { t: 'push'; op: string; value: unknown };

interface WireError {
  message: string;
  code?: ErrorCode;
  param?: string;
  value?: unknown;
  step?: string;
  /** Where it was thrown, on the other thread (kept for the logs of a fault). */
  stack?: string;
}

export interface ChannelHandlers {
  /** Ops the other end may `call`. */
  calls?: Record<string, (...args: never[]) => unknown>;
  /** Ops the other end may `subscribe` to. */
  streams?: Record<string, (...args: never[]) => Observable<unknown>>;
  /** One-way values the other end `push`es. */
  pushes?: Record<string, (value: never) => void>;
}

function toWire(error: unknown): WireError {
  if (error instanceof ChorusError) {
    let value = error.value;
    try {
      structuredClone(value);
    } catch {
      value = String(value);
    }
    return { message: error.message, code: error.code, param: error.param, value, step: error.step, stack: error.stack };
  }
  return { message: error instanceof Error ? error.message : String(error), stack: error instanceof Error ? error.stack : undefined };
}

function fromWire(wire: WireError): Error {
  const error = wire.code === undefined ? new Error(wire.message) : new ChorusError(wire.code, wire.message, { param: wire.param, value: wire.value, step: wire.step });
  if (wire.stack !== undefined) error.stack = wire.stack;
  return error;
}

/** A message that could not be copied to the other thread, as its reader hears it: a failure of its id. */
function uncloneable(message: Message, error: unknown): WireError {
  return { message: `internal error: a ${message.t === 'next' ? 'stream value' : 'call result'} could not be copied between threads (${error instanceof Error ? error.message : String(error)})` };
}

export class Channel {
  private nextId = 1;
  private readonly calls = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private readonly subscribers = new Map<number, { next: (value: unknown) => void; error: (error: Error) => void; complete: () => void }>();
  private readonly served = new Map<number, Subscription>();
  private outbox: Message[] = [];
  private closed = false;

  constructor(
    private readonly port: MessagePort,
    private readonly handlers: ChannelHandlers = {},
  ) {
    port.on('message', (batch: Message[]) => {
      for (const message of batch) this.receive(message);
    });
    // The other end closed (or its thread ended): what is open here ends as on close().
    port.once('close', () => this.close());
  }

  /** Runs the other end's `op` handler; its value (or error) settles the promise. */
  call<T>(op: string, ...args: unknown[]): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.closed) {
        reject(new ChorusError('CHORUS_CLOSED', 'the server is shutting down'));
        return;
      }
      const id = this.nextId++;
      this.calls.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.send({ t: 'call', id, op, args });
    });
  }

  /** The other end's `op` observable: subscribed there when this one is, unsubscribed with it. */
  subscribe<T>(op: string, ...args: unknown[]): Observable<T> {
    return new Observable<T>((subscriber) => {
      if (this.closed) {
        subscriber.error(new ChorusError('CHORUS_CLOSED', 'the server is shutting down'));
        return undefined;
      }
      const id = this.nextId++;
      this.subscribers.set(id, {
        next: (value) => subscriber.next(value as T),
        error: (error) => subscriber.error(error),
        complete: () => subscriber.complete(),
      });
      this.send({ t: 'sub', id, op, args });
      return () => {
        if (this.subscribers.delete(id)) this.send({ t: 'unsub', id });
      };
    });
  }

  push(op: string, value: unknown): void {
    this.send({ t: 'push', op, value });
  }

  /**
   * Stops: calls and streams still open on this end fail with CHORUS_CLOSED, those this end serves are
   * unsubscribed, and the port closes.
   */
  close(): void {
    if (this.closed) return;
    try {
      this.flush();
    } finally {
      this.closed = true;
    }
    const error = new ChorusError('CHORUS_CLOSED', 'the server is shutting down');
    for (const { reject } of this.calls.values()) reject(error);
    for (const { error: fail } of this.subscribers.values()) fail(error);
    for (const subscription of this.served.values()) subscription.unsubscribe();
    this.calls.clear();
    this.subscribers.clear();
    this.served.clear();
    this.port.close();
  }

  private send(message: Message): void {
    if (this.closed) return;
    if (this.outbox.length === 0) queueMicrotask(() => this.flush());
    this.outbox.push(message);
  }

  private flush(): void {
    if (this.outbox.length === 0 || this.closed) return;
    const batch = this.outbox;
    this.outbox = [];
    try {
      this.port.postMessage(batch);
    } catch {
      // A value the structured clone refuses (a function, a class instance's native state): the batch
      // goes message by message, and the one that cannot go fails where it would have been read.
      for (const message of batch) this.postOne(message);
    }
  }

  private postOne(message: Message): void {
    try {
      this.port.postMessage([message]);
      return;
    } catch (error) {
      switch (message.t) {
        case 'ret':
        case 'next':
          this.served.get(message.id)?.unsubscribe();
          this.served.delete(message.id);
          this.port.postMessage([{ t: 'fail', id: message.id, error: uncloneable(message, error) }]);
          return;
        case 'call':
        case 'sub': {
          // Asked by this end: it fails here, as a refused request.
          const refused = new ChorusError('CHORUS_INVALID_ARGUMENT', `the request could not be copied to the engines' thread: ${error instanceof Error ? error.message : String(error)}`);
          this.calls.get(message.id)?.reject(refused);
          this.subscribers.get(message.id)?.error(refused);
          this.calls.delete(message.id);
          this.subscribers.delete(message.id);
          return;
        }
        default:
          // A failure (toWire keeps only what clones), done or unsubscribe: plain data; a snapshot that
          // does not clone leaves the last one standing.
          return;
      }
    }
  }

  private receive(message: Message): void {
    switch (message.t) {
      case 'call': {
        const handler = this.handlers.calls?.[message.op] as ((...args: unknown[]) => unknown) | undefined;
        const { id } = message;
        Promise.resolve()
          .then(() => {
            if (handler === undefined) throw new Error(`no call ${message.op} on this end`);
            return handler(...message.args);
          })
          .then(
            (value) => this.send({ t: 'ret', id, value }),
            (error: unknown) => this.send({ t: 'fail', id, error: toWire(error) }),
          );
        return;
      }
      case 'ret': {
        const pending = this.calls.get(message.id);
        this.calls.delete(message.id);
        pending?.resolve(message.value);
        return;
      }
      case 'fail': {
        const pending = this.calls.get(message.id) ?? this.subscribers.get(message.id);
        this.calls.delete(message.id);
        this.subscribers.delete(message.id);
        if (pending === undefined) return;
        const error = fromWire(message.error);
        if ('reject' in pending) pending.reject(error);
        else pending.error(error);
        return;
      }
      case 'sub': {
        const { id } = message;
        const handler = this.handlers.streams?.[message.op] as ((...args: unknown[]) => Observable<unknown>) | undefined;
        if (handler === undefined) {
          this.send({ t: 'fail', id, error: { message: `no stream ${message.op} on this end` } });
          return;
        }
        let source: Observable<unknown>;
        try {
          source = handler(...message.args);
        } catch (error) {
          this.send({ t: 'fail', id, error: toWire(error) });
          return;
        }
        const subscription = source.subscribe({
          next: (value) => this.send({ t: 'next', id, value }),
          error: (error: unknown) => {
            this.served.delete(id);
            this.send({ t: 'fail', id, error: toWire(error) });
          },
          complete: () => {
            this.served.delete(id);
            this.send({ t: 'done', id });
          },
        });
        if (!subscription.closed) this.served.set(id, subscription);
        return;
      }
      case 'next':
        this.subscribers.get(message.id)?.next(message.value);
        return;
      case 'done': {
        const subscriber = this.subscribers.get(message.id);
        this.subscribers.delete(message.id);
        subscriber?.complete();
        return;
      }
      case 'unsub':
        this.served.get(message.id)?.unsubscribe();
        this.served.delete(message.id);
        return;
      case 'push':
        (this.handlers.pushes?.[message.op] as ((value: unknown) => void) | undefined)?.(message.value);
        return;
    }
  }
}
