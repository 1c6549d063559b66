/** A Chorus server on a loopback port, over a repository, for the server tests. */
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { Service, type ServiceOptions } from '../../src/pipeline/index.ts';
import { buildServer, Metrics, type ServerOptions } from '../../src/server/index.ts';
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
    } });
  const app = await buildServer({ service, metrics, ...options });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    service,
    app,
    close: async () => {
      await app.close();
      await service.close();
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
