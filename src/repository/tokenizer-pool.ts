/**
 * A pool of threads that each open the same tokenizer definition and encode texts, so that a server's
 * event loop does not spend a long prompt's encoding (0.1 to 0.3 ms for 400 characters of GPT-2 BPE)
 * while other requests and streams wait. Texts go to the thread with the fewest in flight; their ids
 * come back as an Int32Array. A thread that is not ready yet, or that failed, leaves its texts to the
 * tokenizer on the calling thread: a request never waits for a thread to start or to come back.
 */
import { Worker } from 'node:worker_threads';
import type { TokenizerDefinition } from '../config/schemas.ts';
import { ChorusError, type ErrorCode } from '../errors.ts';
import type { EncodeOptions, Tokenizer } from '../tokenizers/index.ts';

/** Texts shorter than this are encoded in place: a trip to a thread costs more than they do. */
export const POOL_MIN_CHARS = 256;

/** What a thread answers: the ids of request `id`, or why they failed. */
export type PoolAnswer = { id: number; ids: Int32Array } | { id: number; error: { message: string; code?: ErrorCode; param?: string } } | { ready: true };

/** What a thread is given at its start. */
export interface PoolWorkerData {
  name: string;
  definition: TokenizerDefinition;
  repositoryDir: string;
}

interface Thread {
  worker: Worker;
  ready: boolean;
  failed: boolean;
  pending: Map<number, { resolve: (ids: number[]) => void; reject: (error: Error) => void }>;
}

export class TokenizerPool {
  private readonly threads: Thread[] = [];
  private nextId = 0;
  private closed = false;

  constructor(
    readonly size: number,
    private readonly data: PoolWorkerData,
    private readonly onFailure: (line: string) => void,
  ) {
    for (let i = 0; i < size; i++) this.threads.push(this.start());
  }

  /** The threads that are up and answering. */
  get ready(): number {
    return this.threads.filter((t) => t.ready && !t.failed).length;
  }

  /** Encodes on the least busy ready thread; `fallback` encodes in place where none is ready or the text is short. */
  encode(text: string, options: EncodeOptions | undefined, fallback: Tokenizer): Promise<number[]> {
    let best: Thread | undefined;
    if (!this.closed && text.length >= POOL_MIN_CHARS) {
      for (const t of this.threads) if (t.ready && !t.failed && (best === undefined || t.pending.size < best.pending.size)) best = t;
    }
    if (best === undefined) {
      try {
        return Promise.resolve(fallback.encode(text, options));
      } catch (error) {
        return Promise.reject(error as Error);
      }
    }
    const id = this.nextId++;
    const thread = best;
    return new Promise<number[]>((resolve, reject) => {
      thread.pending.set(id, { resolve, reject });
      thread.worker.postMessage({ id, text, addSpecialTokens: options?.addSpecialTokens });
    });
  }

  /** Takes no more texts; each thread ends once the texts it holds are answered. */
  retire(): void {
    this.closed = true;
    for (const t of this.threads) if (t.pending.size === 0) void t.worker.terminate();
  }

  /** Ends every thread; texts still in flight fail with CHORUS_CLOSED. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.threads.map(async (t) => {
        this.fail(t, new ChorusError('CHORUS_CLOSED', `tokenizer ${this.data.name}: its threads were closed`));
        await t.worker.terminate();
      }),
    );
  }

  private start(): Thread {
    const worker = new Worker(new URL('./tokenizer-worker.mjs', import.meta.url), { workerData: this.data });
    const thread: Thread = { worker, ready: false, failed: false, pending: new Map() };
    // The pool's threads do not keep the process alive.
    worker.unref();
    worker.on('message', (answer: PoolAnswer) => {
      if ('ready' in answer) {
        thread.ready = true;
        return;
      }
      const waiting = thread.pending.get(answer.id);
      if (waiting === undefined) return;
      thread.pending.delete(answer.id);
      if (this.closed && thread.pending.size === 0) void worker.terminate();
      if ('ids' in answer) waiting.resolve(Array.from(answer.ids));
      else waiting.reject(answer.error.code === undefined ? new Error(answer.error.message) : new ChorusError(answer.error.code, answer.error.message, answer.error.param === undefined ? {} : { param: answer.error.param }));
    });
    const down = (why: string): void => {
      if (this.closed) thread.failed = true;
      if (this.closed || thread.failed) return;
      this.onFailure(`tokenizer ${this.data.name}: a tokenizer thread stopped (${why}); its texts are encoded on the event loop`);
      this.fail(thread, new ChorusError('CHORUS_INTERNAL', `tokenizer ${this.data.name}: a tokenizer thread stopped (${why})`));
    };
    worker.on('error', (error) => down(error.message));
    worker.on('exit', (code) => down(`exit code ${code}`));
    return thread;
  }

  private fail(thread: Thread, error: Error): void {
    thread.failed = true;
    for (const waiting of thread.pending.values()) waiting.reject(error);
    thread.pending.clear();
  }
}
