/**
 * The playground: a page at `/` (chat, completion, and the repository drawn as graphs) served from
 * files inside the package, no CDN; and `GET /chorus/repository`, the repository as the page draws it:
 * pipelines, ensembles with their steps and wiring, models with their load state; `random_weights` on
 * whatever runs a model on seeded random weights, and the tokenizers served by their fallback.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { stepKind } from '../../ensemble/index.ts';
import type { Service } from '../../pipeline/index.ts';

const ASSETS = join(import.meta.dirname, 'assets');
const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/playground/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/playground/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
  '/playground/graph.js': { file: 'graph.js', type: 'text/javascript; charset=utf-8' },
};

/** Paths the API key does not guard: the page itself (it asks for the key). */
export const PLAYGROUND_PATHS = Object.keys(FILES);

/** A repository map's entries in name order. */
const byName = <T>(definitions: Map<string, T>): Array<[string, T]> => [...definitions].sort(([a], [b]) => a.localeCompare(b));

export function registerPlayground(app: FastifyInstance, service: Service): void {
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
  app.get('/chorus/repository', async () => {
    const { repository } = service;
    const state = new Map(service.store.index().map((m) => [m.name, m.state]));
    return {
      pipelines: byName(repository.pipelines).map(([name, d]) => ({
        name,
        description: d.value.description ?? null,
        ...(d.value.ensemble ? { ensemble: d.value.ensemble } : { model: d.value.model }),
        chat: d.value.chat_template !== undefined,
        random_weights: service.randomWeights(name).length > 0,
      })),
      ensembles: byName(repository.ensembles).map(([name, d]) => ({
        name,
        description: d.value.description ?? null,
        random_weights: service.randomWeights(name).length > 0,
        inputs: Object.entries(d.value.inputs).map(([tensor, spec]) => ({ name: tensor, datatype: spec.datatype, optional: spec.optional === true })),
        outputs: Object.entries(d.value.outputs).map(([tensor, spec]) => ({ name: tensor, datatype: spec.datatype })),
        steps: d.value.steps.map((step) => {
          const kind = stepKind(step);
          return { name: step.name, kind, target: step[kind], inputs: step.inputs, outputs: step.outputs };
        }),
      })),
      models: byName(repository.models).map(([name, d]) => ({
        name,
        engine: d.value.engine,
        device: d.value.device ?? 'cpu',
        state: state.get(name) ?? 'UNAVAILABLE',
        random_weights: service.store.servesRandomWeights(name),
      })),
      tokenizers: byName(repository.tokenizers).map(([name, d]) => ({ name, type: d.value.type, fallback_in_use: service.store.tokenizerFallback(name) ?? null })),
    };
  });
}
