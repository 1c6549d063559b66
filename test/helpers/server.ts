/** A Chorus server on a loopback port, over a repository, for the server tests. */
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { Subject } from 'rxjs';
import { Service, type ServiceOptions } from '../../src/pipeline/index.ts';
import { buildServer, Metrics, type ServerOptions } from '../../src/server/index.ts';
import { RepositoryClient, type RequestDone } from '../../src/serving/index.ts';
import { ROOT, STORIES } from './paths.ts';
import { scratchDir } from './scratch.ts';

/**
 * A copy of the ensembles fixture repository whose stories tokenizer reads ../shared, with `models`
 * (file name without .yaml -> definition) written into models/.
 */
export function storiesRepository(models: Record<string, string>): string {
  const repository = join(scratchDir('chorus-repo-'), 'repo');
  cpSync(join(ROOT, 'test/fixtures/repositories/ensembles'), repository, { recursive: true });
  writeFileSync(join(repository, 'tokenizers/stories.yaml'), `type: llama2c\nsource: ${STORIES}/tok512.bin\n`);
  for (const [name, definition] of Object.entries(models)) writeFileSync(join(repository, `models/${name}.yaml`), definition);
  return repository;
}

export interface TestServer {
  url: string;
  client: RepositoryClient;
  /** The service under the client, for tests that look at the engines themselves. */
  service: Service;
  app: FastifyInstance;
  close(): Promise<void>;
}

export async function startServer(repository: string, options: Partial<ServerOptions> & ServiceOptions = {}): Promise<TestServer> {
  const done = new Subject<RequestDone>();
  const service = Service.open(repository, {
    log: () => {},
    ...options,
    onRequestDone: (model, metrics) => {
      done.next({ model, metrics });
      options.onRequestDone?.(model, metrics);
    } });
  const client = new RepositoryClient(service, done);
  const app = await buildServer({ client, metrics: new Metrics(), ...options });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    client,
    service,
    app,
    close: async () => {
      await app.close();
      await client.close();
    } };
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
