/**
 * `chorus serve --http-threads N`: HTTP on N threads of its own, every engine on the main thread, as
 * vLLM's `--api-server-count` puts its API servers apart from the engine core. One event loop that
 * parses requests, validates them and writes every stream's events also has to take the engines'
 * tokens in and hand them the next requests; past some tens of thousands of events a second, each
 * waits for the others. Here the threads share the port (SO_REUSEPORT), each serves its connections
 * over the main thread's engine client (serving/thread-client.ts), and the main thread keeps the
 * engines, the tokenizers and gRPC.
 */
import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';
import { MessageChannel, Worker } from 'node:worker_threads';
import { buildServer, Metrics, type ServerOptions } from '../server/index.ts';
import { ClientSnapshots, hostClient, type EngineClient, type HostedClient } from '../serving/index.ts';
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
  /** Its registry as last read (what it counted stays counted after it ends). */
  metrics?: MetricsJson;
}

/** Whether listen() takes reusePort here (Node 22.12 or 23.1 on, Linux or FreeBSD): the threads share the port through it. */
const REUSE_PORT = (() => {
  const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
  const node = major > 23 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12);
  // Where the kernel spreads a port's connections over its sockets.
  return node && (process.platform === 'linux' || process.platform === 'freebsd');
})();

/** Why `--http-threads` above 1 cannot run on this Node, or undefined where it can. */
export function httpThreadsRefused(count: number, reusePort = REUSE_PORT): string | undefined {
  return count > 1 && !reusePort ? `--http-threads ${count} needs listen's reusePort (Node 22.12 or later, on Linux or FreeBSD); this is Node ${process.version} on ${process.platform}: use --http-threads 1` : undefined;
}

/**
 * `--http-threads` as a count (1 to 64), undefined when it is none. `auto`: 2 on machines of 8 cores or
 * more (GPT-2 served to 64 streams on an H100 host of 16: TTFT p50 15-24 ms against 31-39 on one
 * thread; 4 threads did no better than 2), else 1: on fewer cores the threads would take the cores the
 * engines compute on (and 1 on a Node without reusePort).
 */
export function httpThreadCount(value: string, cores = availableParallelism(), reusePort = REUSE_PORT): number | undefined {
  if (value === 'auto') return cores >= 8 && reusePort ? 2 : 1;
  const count = Number(value);
  return Number.isInteger(count) && count >= 1 && count <= 64 ? count : undefined;
}

type MetricsJson = Awaited<ReturnType<Metrics['json']>>;

/** How long a scrape waits for a thread's registry before it takes the one it last had. */
const METRICS_WAIT_MS = 1000;
/** How long threads get to end once their connections are cut before they are terminated. */
const TERMINATE_AFTER_MS = 2000;

/** Fails with EADDRINUSE where another process listens on `port` (SO_REUSEPORT would share it). */
async function portFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

export async function startHttpThreads(options: { count: number; client: EngineClient; metrics: Metrics; host: string; port: number; server: Omit<ServerOptions, 'client' | 'metrics'>; log: (line: string) => void }): Promise<HttpThreads> {
  await portFree(options.host, options.port);
  const threads = new Set<Thread>();
  let closing = false;
  const unfollow = options.metrics.follow(options.client);
  const snapshots = new ClientSnapshots(options.client, { onError: (error) => options.log(`HTTP threads: the repository's state could not be read: ${error instanceof Error ? error.message : String(error)}`) });
  // The whole server's metrics: the main thread's registry (process, engines, generation) and every
  // HTTP thread's (its requests), the threads that ended with the registry last read from them. A
  // thread that does not answer in time counts with its last one.
  const retired: MetricsJson[] = [];
  const metricsText = async (): Promise<string> => {
    const live = [...threads];
    const answers = await Promise.allSettled(
      live.map((t) =>
        Promise.race([t.hosted.channel.call<MetricsJson>('metricsJson'), new Promise<never>((_, reject) => setTimeout(() => reject(new Error('no answer')), METRICS_WAIT_MS).unref())]),
      ),
    );
    answers.forEach((answer, i) => {
      if (answer.status === 'fulfilled') live[i]!.metrics = answer.value;
    });
    // The main registry's metrics that the sum leaves out (its start time) are taken as they are.
    const main = (await options.metrics.json()).map((m) => (m.aggregator === 'omit' ? { ...m, aggregator: 'first' as const } : m));
    return Metrics.aggregate([main, ...retired, ...live.flatMap((t) => (t.metrics === undefined ? [] : [t.metrics]))]);
  };
  const tsx = import.meta.resolve('tsx/esm/api');
  const entry = new URL('./http-thread.ts', import.meta.url).href;
  // The thread loads the TypeScript source as the main thread does (bin/chorus.js: tsx's loader).
  const code = `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); })`;

  let restartMs = 1000;
  const restart = (): void => {
    // A thread that ends on its own is replaced (its connections are lost, the port is not), a second
    // after; one that cannot start is tried again later, up to 30 s apart.
    setTimeout(() => {
      if (closing) return;
      start(firstPort).then(
        () => (restartMs = 1000),
        (error: unknown) => {
          options.log(`HTTP thread could not start again (${error instanceof Error ? error.message : String(error)}); trying again in ${restartMs / 1000} s`);
          restartMs = Math.min(2 * restartMs, 30_000);
          restart();
        },
      );
    }, restartMs).unref();
  };

  const start = (listenPort: number): Promise<{ address: string; port: number }> => {
    const { port1, port2 } = new MessageChannel();
    const hosted = hostClient(options.client, port1, snapshots, { calls: { metrics: metricsText } });
    const data: HttpThreadData = { port: port2, host: options.host, listenPort, server: options.server };
    let worker: Worker;
    try {
      worker = new Worker(code, { eval: true, workerData: data, transferList: [port2] });
    } catch (error) {
      hosted.close();
      return Promise.reject(error);
    }
    const id = worker.threadId;
    const thread: Thread = { worker, hosted };
    threads.add(thread);
    return new Promise((resolve, reject) => {
      let listening = false;
      worker.once('message', (message: { listening: string; port: number }) => {
        listening = true;
        resolve({ address: message.listening, port: message.port });
      });
      worker.once('error', (error) => {
        if (!listening) reject(error);
        else options.log(`HTTP thread ${id} failed: ${error.message}`);
      });
      worker.once('exit', (code) => {
        thread.hosted.close();
        threads.delete(thread);
        if (thread.metrics !== undefined) retired.push(thread.metrics);
        if (!listening) {
          reject(new Error(`HTTP thread ${id} exited with code ${code} before it listened`));
          return;
        }
        if (closing) return;
        options.log(`HTTP thread ${id} exited (code ${code}); starting another`);
        restart();
      });
    });
  };

  let firstPort = options.port;
  const terminate = (): Promise<unknown> => Promise.all([...threads].map((t) => t.worker.terminate()));
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
        snapshots.close();
        unfollow();
      },
      cutConnections: () => {
        for (const t of threads) void t.hosted.channel.call('cutConnections').catch(() => undefined);
        // A thread that does not end once its connections are gone (its loop blocked) is stopped.
        setTimeout(() => void terminate(), TERMINATE_AFTER_MS).unref();
      },
    };
  } catch (error) {
    closing = true;
    snapshots.close();
    unfollow();
    await terminate();
    throw error;
  }
}

/**
 * HTTP as `--http-threads` asks: on this thread beside the engines (count 1), or on threads of its own.
 */
export async function startHttp(options: Parameters<typeof startHttpThreads>[0]): Promise<HttpThreads> {
  if (options.count > 1) return startHttpThreads(options);
  const app = await buildServer({ ...options.server, client: options.client, metrics: options.metrics });
  const address = await app.listen({ host: options.host, port: options.port });
  return { address, close: () => app.close(), cutConnections: () => app.server.closeAllConnections() };
}
