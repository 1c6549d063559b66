/**
 * Work stops when the client leaves: a request's stream is subscribed while its connection is open and
 * unsubscribed when the connection closes early (which cancels generation in the engine).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Observable } from 'rxjs';
import { ChorusError } from '../errors.ts';
import { wireError } from './errors.ts';

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

/**
 * Writes `data: <json>\n\n` events of a stream; ends with `data: [DONE]` when asked; stops when the client
 * leaves. The 200 and its headers wait for the first event: a request refused before it (a max_tokens
 * that cannot fit) answers with its error's status and body as a request that is not streamed does; one
 * that fails later gets the error as its last event.
 */
export function sendEvents<T>(request: FastifyRequest, reply: FastifyReply, stream: Observable<T>, options: { done?: boolean; error: (error: unknown) => unknown }): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  const open = (): void => {
    if (!raw.headersSent) raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
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
        if (options.done) raw.write('data: [DONE]\n\n');
        raw.end();
      }
      resolve();
    };
    const subscription = stream.subscribe({
      next: (event) => {
        open();
        raw.write(`data: ${JSON.stringify(event)}\n\n`);
      },
      error: (error: unknown) => {
        if (!raw.headersSent) {
          reply.raw.off('close', onClose);
          raw.writeHead(wireError(error).status, { 'content-type': 'application/json; charset=utf-8' });
          raw.end(JSON.stringify(options.error(error)));
          resolve();
          return;
        }
        raw.write(`data: ${JSON.stringify(options.error(error))}\n\n`);
        finish();
      },
      complete: finish,
    });
    function onClose(): void {
      if (raw.writableFinished) return;
      subscription.unsubscribe();
      resolve();
    }
    reply.raw.on('close', onClose);
  });
}
