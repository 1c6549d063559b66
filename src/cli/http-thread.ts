/**
 * One HTTP thread of `chorus serve --http-threads`: the server (buildServer) over the main thread's
 * engine client, listening on the shared port (SO_REUSEPORT: the kernel spreads connections over the
 * threads). Its /metrics answers the whole server's: the main thread sums every thread's registry.
 * Started by http-threads.ts, which says what it may ask of this thread: its metrics, to close, to cut
 * its connections.
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { FastifyInstance, FastifyListenOptions } from 'fastify';
import { buildServer, Metrics, type ServerOptions } from '../server/index.ts';
import { ThreadClient } from '../serving/index.ts';

export interface HttpThreadData {
  port: MessagePort;
  host: string;
  listenPort: number;
  server: Omit<ServerOptions, 'client' | 'metrics'>;
}

const data = workerData as HttpThreadData;
const metrics = new Metrics({ httpThread: true });
// The server, once built (the main thread may ask to close before).
const held: { app?: FastifyInstance } = {};
const client = await ThreadClient.connect(data.port, {
  metricsJson: () => metrics.json(),
  close: async () => {
    await held.app?.close();
  },
  cutConnections: () => held.app?.server.closeAllConnections(),
});
metrics.exposeFrom(() => client.channel.call<string>('metrics'));
const app = (held.app = await buildServer({ ...data.server, client, metrics }));
// fastify passes its listen options to node's server.listen, which takes reusePort (Node >= 22.12).
const listen: FastifyListenOptions & { reusePort: boolean } = { host: data.host, port: data.listenPort, reusePort: true };
const address = await app.listen(listen);
parentPort!.postMessage({ listening: address, port: (app.server.address() as { port: number }).port });
