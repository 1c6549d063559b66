/**
 * Work stops when the client leaves: a request's stream is subscribed while its connection is open and
 * unsubscribed when the connection closes early (which cancels generation in the engine).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Observable } from 'rxjs';
import { ChorusError } from '../errors.ts';
import { errorAnswer } from './errors.ts';

/** Whether the client left before its request was handled (its 'close' has passed: nothing will tell). */
function gone(reply: FastifyReply): boolean {
  return reply.raw.destroyed || reply.raw.socket?.destroyed === true;
}

/** The stream's last value; the subscription ends if the client disconnects first. */
export function cancelOnClose<T>(request: FastifyRequest, reply: FastifyReply, stream: Observable<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (gone(reply)) {
      reject(new ChorusError('CHORUS_CLOSED', 'the client closed the connection'));
      return;
    }
    let last: T | undefined;
    let has = false;
    const subscription = stream.subscribe({
      next: (value) => {
        last = value;
        has = true;
      },
      error: (error: unknown) => {
        reply.raw.off('close', onClose);
        reject(error);
      },
      complete: () => {
        reply.raw.off('close', onClose);
        if (has) resolve(last as T);
        else reject(new ChorusError('CHORUS_INTERNAL', 'the request produced no result'));
      },
    });
    function onClose(): void {
      if (reply.raw.writableFinished) return;
      subscription.unsubscribe();
      reject(new ChorusError('CHORUS_CLOSED', 'the client closed the connection'));
    }
    reply.raw.on('close', onClose);
  });
}

/** Streams with events not yet written, and whether their write is scheduled. */
const unwritten = new Set<() => void>();
let flushing = false;

/** Writes every stream's waiting events: once per turn of the event loop, after the turn's tokens. */
function flushAll(): void {
  flushing = false;
  const streams = [...unwritten];
  unwritten.clear();
  for (const flush of streams) flush();
}

/**
 * Writes a stream of events, each already JSON, as `data: <json>\n\n`; `first` goes before the first
 * and `last()` after the last; ends with `data: [DONE]` when asked; stops when the client leaves. The
 * events of one turn of the event loop (one engine step's token, or several steps' when the loop fell
 * behind) go out in one write, after the turn. The 200 and its headers wait for the first event: a
 * request refused before it (a max_tokens that cannot fit) answers with its error's status and body as
 * a request that is not streamed does; one that fails later gets the error as its last event.
 */
export function sendEvents(request: FastifyRequest, reply: FastifyReply, stream: Observable<string>, options: { done?: boolean; first?: string; last?: () => string | undefined; error: (error: unknown) => unknown }): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  let pending = '';
  const flush = (): void => {
    if (pending === '' || raw.writableEnded) return;
    raw.write(pending);
    pending = '';
  };
  const add = (json: string): void => {
    if (!unwritten.has(flush)) {
      unwritten.add(flush);
      if (!flushing) {
        flushing = true;
        setImmediate(flushAll);
      }
    }
    pending += `data: ${json}\n\n`;
  };
  // The reply's own headers (CORS, set before the route ran) go out with the hijacked response's.
  const own = reply.getHeaders() as Record<string, string>;
  const open = (): void => {
    if (raw.headersSent) return;
    raw.writeHead(200, { ...own, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
    if (options.first !== undefined) add(options.first);
  };
  return new Promise<void>((resolve) => {
    if (gone(reply)) {
      resolve();
      return;
    }
    const finish = (): void => {
      reply.raw.off('close', onClose);
      if (!raw.writableEnded) {
        open();
        const last = options.last?.();
        if (last !== undefined) add(last);
        if (options.done) pending += 'data: [DONE]\n\n';
        raw.end(pending);
        pending = '';
      }
      unwritten.delete(flush);
      resolve();
    };
    const subscription = stream.subscribe({
      next: (json) => {
        open();
        add(json);
      },
      error: (error: unknown) => {
        if (!raw.headersSent) {
          reply.raw.off('close', onClose);
          const { status, headers } = errorAnswer(error, request.url.startsWith('/v1/'));
          raw.writeHead(status, { ...own, ...headers, 'content-type': 'application/json; charset=utf-8' });
          raw.end(JSON.stringify(options.error(error)));
          resolve();
          return;
        }
        add(JSON.stringify(options.error(error)));
        finish();
      },
      complete: finish,
    });
    function onClose(): void {
      if (raw.writableFinished) return;
      unwritten.delete(flush);
      subscription.unsubscribe();
      resolve();
    }
    reply.raw.on('close', onClose);
  });
}
