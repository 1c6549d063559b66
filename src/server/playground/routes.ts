/**
 * The playground: a page at `/` (chat, completion, and the repository drawn as graphs) served from
 * files inside the package, no CDN; and `GET /chorus/repository`, the repository as the page draws it:
 * pipelines, ensembles with their steps and wiring, models with their load state; `random_weights` on
 * whatever runs a model on seeded random weights, and the tokenizers served by their fallback.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { EngineClient } from '../../serving/index.ts';

const ASSETS = join(import.meta.dirname, 'assets');
const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/playground/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/playground/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
  '/playground/graph.js': { file: 'graph.js', type: 'text/javascript; charset=utf-8' },
};

/** Paths the API key does not guard: the page itself (it asks for the key). */
export const PLAYGROUND_PATHS = Object.keys(FILES);

export function registerPlayground(app: FastifyInstance, client: EngineClient): void {
  for (const [path, { file, type }] of Object.entries(FILES)) {
    const body = readFileSync(join(ASSETS, file));
    app.get(path, async (_request, reply) =>
      reply
        .type(type)
        .header('cache-control', 'no-cache')
        .header('content-security-policy', "default-src 'self'; style-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'")
        .header('x-content-type-options', 'nosniff')
        .send(body),
    );
  }
  app.get('/chorus/repository', async () => ({
    pipelines: client.models('pipeline').map((m) => ({ name: m.name, description: m.description, ...m.pipeline, random_weights: m.randomWeights })),
    ensembles: client.models('ensemble').map((m) => ({
      name: m.name,
      description: m.description,
      random_weights: m.randomWeights,
      inputs: m.inputs.map((t) => ({ name: t.name, datatype: t.datatype, optional: t.optional })),
      outputs: m.outputs.map((t) => ({ name: t.name, datatype: t.datatype })),
      steps: m.steps,
    })),
    models: client.models('model').map((m) => ({ name: m.name, ...m.model, state: m.state, random_weights: m.randomWeights })),
    tokenizers: client.tokenizers().map((t) => ({ name: t.name, type: t.type, fallback_in_use: t.fallbackInUse })),
  }));
}
