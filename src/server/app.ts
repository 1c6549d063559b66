/**
 * The HTTP server: fastify over an engine client. One folder per protocol (kserve/, generate/, openai/), each
 * with its routes, and playground/ (the page at `/`); the HTTP layer never touches ONNX Runtime.
 * Cross-cutting here: the optional API key (every route but health, metrics and the page), the body size
 * limit, CORS (off unless asked), error shapes, metrics.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { ChorusError, describe } from '../errors.ts';
import type { EngineClient } from '../serving/index.ts';
import { errorAnswer, errorBody, openAiErrorBody, wireError } from './errors.ts';
import { registerGenerate } from './generate/routes.ts';
import { pacedClient } from './intake.ts';
import { parseJsonBody } from './json-body.ts';
import { registerKserve } from './kserve/routes.ts';
import type { Metrics } from './metrics.ts';
import { registerOpenAi } from './openai/routes.ts';
import { PLAYGROUND_PATHS, registerPlayground } from './playground/routes.ts';
import { AJV_OPTIONS, validationError } from './validation.ts';

export interface ServerOptions {
  client: EngineClient;
  metrics: Metrics;
  /** Requests must send `Authorization: Bearer <apiKey>` (health routes excepted). */
  apiKey?: string;
  /** Allowed CORS origin(s); default: no CORS headers. */
  corsOrigin?: string;
  /** Largest request body, bytes. Default: 64 MiB. */
  bodyLimit?: number;
  /** fastify's logger option (pino). Default: off. */
  logger?: boolean | Record<string, unknown>;
}

/** Routes whose body is JSON whatever its content type (unless binary tensors say otherwise). */
const JSON_ANY_TYPE = /^\/v2\/models\/[^/]+(\/versions\/[^/]+)?\/(generate|generate_stream|infer)$/;
/** On every answer from a pipeline, ensemble or model that runs a model on seeded random weights. */
export const RANDOM_WEIGHTS_HEADER = 'x-chorus-random-weights';
const PUBLIC = /^\/(v2\/health\/(live|ready)|metrics)$/;
/** The longest model name a path may carry. */
const MAX_NAME_LENGTH = 200;
/** The methods the routes answer, for a 405's Allow header. */
const METHODS = ['GET', 'POST'] as const;

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const bodyLimit = options.bodyLimit ?? 64 * 1024 * 1024;
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit,
    ajv: { customOptions: AJV_OPTIONS },
    // A URL the router cannot read (a bad percent-encoding, a name past its length) answers in the
    // protocol's error shape, as every other refusal does.
    frameworkErrors: (error, request, reply) => {
      const path = request.url.split('?')[0]!;
      const refused =
        error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? new ChorusError('CHORUS_INVALID_ARGUMENT', `a name in the path is longer than ${MAX_NAME_LENGTH} characters`, { param: 'path' })
          : new ChorusError('CHORUS_INVALID_ARGUMENT', `the path must be a valid URL path (percent-encoded UTF-8), got ${describe(path)}`, { param: 'path' });
      void (reply as FastifyReply).code(400).send(path.startsWith('/v1/') ? openAiErrorBody(refused) : errorBody(refused));
    },
    routerOptions: { maxParamLength: MAX_NAME_LENGTH },
  });
  // JSON bodies; on the generate and infer routes a body is JSON whatever its content type (curl -d
  // sends application/x-www-form-urlencoded), as Triton's are. Binary tensor bodies (with
  // Inference-Header-Content-Length), and other bodies elsewhere, arrive as buffers.
  const parseJson = (request: FastifyRequest, body: Buffer, done: (error: Error | null, body?: unknown) => void): void => {
    if (request.headers['inference-header-content-length'] !== undefined) {
      done(null, body);
      return;
    }
    const text = body.toString('utf8');
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    let value: unknown;
    try {
      value = parseJsonBody(text);
    } catch (error) {
      done(error as Error, undefined);
      return;
    }
    done(null, value);
  };
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, parseJson);
  const jsonOr = (other: (body: Buffer) => unknown) => (request: FastifyRequest, body: string | Buffer, done: (error: Error | null, body?: unknown) => void): void => {
    if (JSON_ANY_TYPE.test(request.url.split('?')[0]!)) parseJson(request, body as Buffer, done);
    else done(null, other(body as Buffer));
  };
  app.addContentTypeParser(['application/octet-stream', '*'], { parseAs: 'buffer' }, jsonOr((body) => body));
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('text/plain', { parseAs: 'buffer' }, jsonOr((body) => body.toString('utf8')));

  app.addHook('onRequest', async (request, reply) => {
    if (options.corsOrigin !== undefined) {
      reply.header('access-control-allow-origin', options.corsOrigin);
      reply.header('access-control-allow-headers', 'authorization, content-type, inference-header-content-length');
      reply.header('access-control-allow-methods', 'GET, POST, OPTIONS');
    }
    const path = request.url.split('?')[0]!;
    if (options.apiKey !== undefined && !PUBLIC.test(path) && !PLAYGROUND_PATHS.includes(path) && request.method !== 'OPTIONS' && request.headers.authorization !== `Bearer ${options.apiKey}`) {
      throw new ChorusError('CHORUS_UNAUTHORIZED', 'missing or wrong API key: send Authorization: Bearer <key>', { param: 'authorization' });
    }
  });
  // Per-model request metrics, also for streamed (hijacked) replies and bodies that fail their schema;
  // every answer of a model on random weights says so in a header (set on the raw response, so
  // streamed replies carry it too).
  // Only names the repository has get series: a name made up by a client is refused, not counted.
  app.addHook('preValidation', async (request, reply) => {
    const model = (request.params as { model?: string } | undefined)?.model ?? (request.body as { model?: unknown } | undefined)?.model;
    if (typeof model !== 'string' || !known(options.client, model)) return;
    if (options.client.randomWeights(model)) reply.raw.setHeader(RANDOM_WEIGHTS_HEADER, 'true');
    if (request.method !== 'POST') return;
    const end = options.metrics.begin(model);
    reply.raw.once('close', () => end(reply.raw.statusCode));
  });
  // The OpenAI routes take JSON only, as OpenAI's do: another body is a 415 that says so, rather than
  // a missing field.
  app.addHook('preValidation', async (request) => {
    if (request.method !== 'POST' || !request.url.startsWith('/v1/')) return;
    const type = request.headers['content-type']?.split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json' || request.headers['inference-header-content-length'] !== undefined) {
      throw new ChorusError('CHORUS_UNSUPPORTED_MEDIA_TYPE', `content-type must be application/json, got ${type === undefined ? 'none' : describe(type)}`, { param: 'content-type' });
    }
  });

  app.setErrorHandler((raw, request, reply) => {
    const openAi = request.url.startsWith('/v1/');
    const failed = (raw as { validation?: Parameters<typeof validationError>[0] }).validation;
    const error = failed === undefined ? raw : validationError(failed);
    const { status, headers } = errorAnswer(error, openAi);
    void reply.headers(headers);
    if ((raw as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      const tooLarge = new ChorusError('CHORUS_TOO_LARGE', `the body must be at most ${bodyLimit} bytes (the server's body limit)`, { param: 'body' });
      void reply.code(413).send(openAi ? openAiErrorBody(tooLarge) : errorBody(tooLarge));
      return;
    }
    // A client's mistake is news, not a fault: one line at info, no stack. So is a client that left.
    if (status >= 500 && !(error instanceof ChorusError && error.code === 'CHORUS_CLOSED')) request.log.error(error);
    else request.log.info({ status, code: wireError(error).code, message: wireError(error).message }, 'request refused');
    void reply.code(status).send(openAi ? openAiErrorBody(error) : errorBody(error));
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const openAi = path.startsWith('/v1/');
    // A path that another method answers is a 405 naming the methods it takes.
    const allowed = METHODS.filter((method) => method !== request.method && app.findRoute({ method, url: path }) !== null);
    if (allowed.length > 0) {
      const error = new ChorusError('CHORUS_METHOD_NOT_ALLOWED', `${path} takes ${allowed.join(' or ')}, not ${request.method}`, { param: 'method' });
      void reply.code(405).header('allow', allowed.join(', ')).send(openAi ? openAiErrorBody(error) : errorBody(error));
      return;
    }
    const error = new ChorusError('CHORUS_NOT_FOUND', `no route ${request.method} ${path}`);
    void reply.code(404).send(openAi ? openAiErrorBody(error) : errorBody(error));
  });
  app.options('*', async (_request, reply) => reply.code(204).send());

  const unfollow = options.metrics.follow(options.client);
  app.addHook('onClose', async () => unfollow());
  app.get('/metrics', async (_request, reply) => reply.type('text/plain; version=0.0.4').send(await options.metrics.text()));
  // Text and tensor requests reach the client one per turn of the event loop (intake.ts; CHORUS_INTAKE_PACING=0: not).
  const paced = process.env.CHORUS_INTAKE_PACING === '0' ? options.client : pacedClient(options.client);
  registerKserve(app, paced);
  registerGenerate(app, paced);
  registerOpenAi(app, paced);
  registerPlayground(app, options.client);
  return app;
}

/** Whether the repository has a pipeline, ensemble or model of this name. */
function known(client: EngineClient, name: string): boolean {
  try {
    client.resolve(name);
    return true;
  } catch {
    return false;
  }
}
