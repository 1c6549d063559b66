/**
 * `chorus serve --http-threads N`: HTTP on N threads of its own, every engine on the main thread, as
 * vLLM's `--api-server-count` puts its API servers apart from the engine core. One event loop that
 * parses requests, validates them and writes every stream's events also has to take the engines'
 * tokens in and hand them the next requests; past some tens of thousands of events a second, each
 * waits for the others. Here the threads share the port (SO_REUSEPORT), each serves its connections
 * over the main thread's engine client (serving/thread-client.ts), and the main thread keeps the
 * engines, the tokenizers and gRPC.
 */
import { availableParallelism } from 'node:os';
import { MessageChannel, Worker } from 'node:worker_threads';
import { Metrics, type ServerOptions } from '../server/index.ts';
import { hostClient, type EngineClient, type HostedClient } from '../serving/index.ts';
import type { HttpThreadData } from './http-thread.ts';

export interface HttpThreads {
  /** The address the threads listen on (http://host:port). */
  readonly address: string;
  /** Stops taking connections and waits for every thread's requests in flight; then the threads exit. */
  close(): Promise<void>;
  /** Cuts every thread's open connections (past a shutdown deadline). */
  cutConnections(): void;
}

interface Thread {
  worker: Worker;
  hosted: HostedClient;
}

/** Whether this Node's listen() takes reusePort (22.12 on; the threads share the port through it). */
const REUSE_PORT = (() => {
  const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
  return major > 22 || (major === 22 && minor >= 12);
})();

/** Why `--http-threads` above 1 cannot run on this Node, or undefined where it can. */
export function httpThreadsRefused(count: number, reusePort = REUSE_PORT): string | undefined {
  return count > 1 && !reusePort ? `--http-threads ${count} needs Node 22.12 or later (listen's reusePort), this is ${process.version}; use --http-threads 1` : undefined;
}

/**
 * `--http-threads` as a count (1 to 64), undefined when it is none. `auto`: 2 on machines of 8 cores or
 * more (GPT-2 served to 64 streams on an H100 host of 16: TTFT p50 21-24 ms against 31-39 on one
 * thread; 4 threads did no better than 2), else 1: on fewer cores the threads would take the cores the
 * engines compute on (and 1 on a Node without reusePort).
 */
export function httpThreadCount(value: string, cores = availableParallelism(), reusePort = REUSE_PORT): number | undefined {
  if (value === 'auto') return cores >= 8 && reusePort ? 2 : 1;
  const count = Number(value);
  return Number.isInteger(count) && count >= 1 && count <= 64 ? count : undefined;
}

export async function startHttpThreads(options: { count: number; client: EngineClient; metrics: Metrics; host: string; port: number; server: Omit<ServerOptions, 'client' | 'metrics'>; log: (line: string) => void }): Promise<HttpThreads> {
  const threads = new Set<Thread>();
  let closing = false;
  const unfollow = options.metrics.follow(options.client);
  // The whole server's metrics: the main thread's registry (process, engines, generation) and every
  // HTTP thread's (its requests).
  const metricsText = async (): Promise<string> => Metrics.aggregate([await options.metrics.json(), ...(await Promise.all([...threads].map((t) => t.hosted.channel.call<Awaited<ReturnType<Metrics['json']>>>('metricsJson'))))]);
  const tsx = import.meta.resolve('tsx/esm/api');
  const entry = new URL('./http-thread.ts', import.meta.url).href;
  // The thread loads the TypeScript source as the main thread does (bin/chorus.js: tsx's loader).
  const code = `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); })`;

  const start = (listenPort: number): Promise<{ address: string; port: number }> => {
    const { port1, port2 } = new MessageChannel();
    const data: HttpThreadData = { port: port2, host: options.host, listenPort, server: options.server };
    const worker = new Worker(code, { eval: true, workerData: data, transferList: [port2] });
    const thread: Thread = { worker, hosted: hostClient(options.client, port1, { calls: { metrics: metricsText } }) };
    threads.add(thread);
    return new Promise((resolve, reject) => {
      let listening = false;
      worker.once('message', (message: { listening: string; port: number }) => {
        listening = true;
        resolve({ address: message.listening, port: message.port });
      });
      worker.once('error', (error) => {
        if (!listening) reject(error);
        else options.log(`HTTP thread ${worker.threadId} failed: ${error.message}`);
      });
      worker.once('exit', (code) => {
        thread.hosted.close();
        threads.delete(thread);
        if (!listening) {
          reject(new Error(`HTTP thread ${worker.threadId} exited with code ${code} before it listened`));
          return;
        }
        if (closing) return;
        // A thread that ends on its own is replaced: its connections are lost, the port is not.
        options.log(`HTTP thread ${worker.threadId} exited (code ${code}); starting another`);
        start(firstPort).catch((error: unknown) => options.log(`HTTP thread could not start again: ${error instanceof Error ? error.message : String(error)}`));
      });
    });
  };

  let firstPort = options.port;
  try {
    // The first thread binds the port (an ephemeral one when 0); the others join it.
    const first = await start(options.port);
    firstPort = first.port;
    await Promise.all(Array.from({ length: options.count - 1 }, () => start(firstPort)));
    return {
      address: first.address,
      close: async () => {
        closing = true;
        const exits = [...threads].map((t) => new Promise((resolve) => t.worker.once('exit', resolve)));
        await Promise.all([...threads].map((t) => t.hosted.channel.call('close').catch(() => undefined)));
        for (const t of threads) t.hosted.close();
        await Promise.all(exits);
        unfollow();
      },
      cutConnections: () => {
        for (const t of threads) void t.hosted.channel.call('cutConnections').catch(() => undefined);
      },
    };
  } catch (error) {
    closing = true;
    unfollow();
    await Promise.all([...threads].map((t) => t.worker.terminate()));
    throw error;
  }
}
