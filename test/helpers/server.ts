/** A Chorus server on a loopback port, over a repository, for the server tests. */
import type { FastifyInstance } from 'fastify';
import { Service, type ServiceOptions } from '../../src/pipeline/index.ts';
import { buildServer, Metrics, type ServerOptions } from '../../src/server/index.ts';

export interface TestServer {
  url: string;
  service: Service;
  app: FastifyInstance;
  close(): Promise<void>;
}

export async function startServer(repository: string, options: Partial<ServerOptions> & ServiceOptions = {}): Promise<TestServer> {
  const metrics = new Metrics();
  const service = Service.open(repository, {
    log: () => {},
    ...options,
    onRequestDone: (model, m) => {
      metrics.generation(model, m);
      options.onRequestDone?.(model, m);
    },
  });
  const app = await buildServer({ service, metrics, ...options });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    service,
    app,
    close: async () => {
      await app.close();
      await service.close();
    },
  };
}

/** The `data:` payloads of an SSE body, as a plain EventSource-style reader sees them. */
export function sseData(body: string): string[] {
  return body
    .split(/\r?\n\r?\n/)
    .filter((event) => event.trim() !== '')
    .map((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n'),
    );
}
