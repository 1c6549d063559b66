/**
 * Triton's generate extension: `POST /v2/models/{m}/generate` answers one JSON object, and
 * `/generate_stream` answers Server-Sent Events, one `data: <json>` per delta (an error after the 200 is
 * an event `data: {"error": ...}`). A pipeline's last answer carries `usage` (prompt and completion
 * tokens), as the OpenAI routes do. For a pipeline, the body's fields (and those in `parameters`) are the
 * pipeline's request fields; for an ensemble, they fill its input tensors by name and the answer holds
 * its outputs by name.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { map, type Observable } from 'rxjs';
import { ChorusError, invalidArgument } from '../../errors.ts';
import { tensorFromJson, type EngineClient, type ModelInfo, type PipelineUpdate, type Tensor, type TensorRecord, type TextRequest, type TokenLogProb } from '../../serving/index.ts';
import { cancelOnClose, sendEvents } from '../disconnect.ts';
import { errorBody } from '../errors.ts';
import { checkVersion, VERSION } from '../kserve/checks.ts';
import { SAMPLING_FIELDS, samplingOf } from '../schemas/fields.ts';
import { GenerateBody } from '../schemas/generate.ts';

type Params = { model: string; version?: string };
type Generate = { Params: Params; Body: GenerateBody };

export function registerGenerate(app: FastifyInstance, client: EngineClient): void {
  for (const prefix of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
    app.post<Generate>(`${prefix}/generate`, { schema: { body: GenerateBody } }, async (request, reply) => {
      const { stream, envelope } = start(client, request, false);
      return { ...envelope, ...(await cancelOnClose(request, reply, stream)) };
    });
    app.post<Generate>(`${prefix}/generate_stream`, { schema: { body: GenerateBody } }, async (request, reply) => {
      const { envelope, deltas } = start(client, request, true);
      // Each event is the envelope's fields, then the event's: the envelope written once, as JSON.
      const head = JSON.stringify(envelope).slice(0, -1);
      const events = deltas.pipe(
        map((event) => {
          const fields = JSON.stringify(event);
          return fields === '{}' ? `${head}}` : `${head},${fields.slice(1)}`;
        }),
      );
      await sendEvents(request, reply, events, { error: (error) => errorBody(error) });
    });
  }
}

/** The request's answer (final) and its stream of events, for the named pipeline or ensemble. */
function start(client: EngineClient, request: FastifyRequest<Generate>, streamed: boolean): { envelope: Record<string, unknown>; stream: Observable<Record<string, unknown>>; deltas: Observable<Record<string, unknown>> } {
  const name = request.params.model;
  const { id, parameters, stream, ...fields } = request.body;
  const all: Record<string, unknown> = { ...fields, ...parameters };
  const asked = parameters?.stream ?? stream;
  if (asked !== undefined && asked !== null && asked !== streamed) {
    throw invalidArgument('stream', streamed ? 'true on generate_stream (or left out)' : 'false on generate (or left out): generate_stream streams', asked);
  }
  delete all.stream;
  const envelope = { model_name: name, model_version: VERSION, ...(id === undefined ? {} : { id }) };
  const info = resolve(client, name);
  checkVersion(info, request.params.version);
  if (info.kind === 'pipeline') {
    const updates = client.generate(name, { ...textFields(all), stream: streamed });
    const answer = (u: PipelineUpdate, text: string, logprobs: TokenLogProb[] | undefined): Record<string, unknown> => ({
      text_output: text,
      ...(logprobs === undefined ? {} : { logprobs: logprobs.map((t) => ({ token: t.text, logprob: t.logprob, top_logprobs: t.top.map((a) => ({ token: a.text, logprob: a.logprob })) })) }),
      ...(u.choices[0]?.finishReason ? { finish_reason: u.choices[0].finishReason } : {}),
      ...(u.usage ? { usage: { prompt_tokens: u.usage.promptTokens, completion_tokens: u.usage.completionTokens } } : {}),
    });
    // A whole answer's log-probabilities are every update's, in order.
    const every: TokenLogProb[] = [];
    const asksLogprobs = all.logprobs === true;
    return {
      envelope,
      stream: updates.pipe(
        map((u) => {
          every.push(...(u.choices[0]?.logprobs ?? []));
          return answer(u, u.choices[0]?.text ?? '', asksLogprobs ? every : undefined);
        }),
      ),
      deltas: updates.pipe(map((u) => answer(u, u.choices[0]?.delta ?? '', asksLogprobs ? (u.choices[0]?.logprobs ?? []) : undefined))),
    };
  }
  const inputs: Record<string, Tensor> = {};
  for (const [field, value] of Object.entries(all)) {
    const spec = info.inputs.find((t) => t.name === field);
    if (spec === undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `ensemble ${name} has no input ${field}; its inputs are: ${info.inputs.map((t) => t.name).join(', ')}`, { param: field });
    inputs[field] = tensorFromJson(field, value, spec);
  }
  const outputs = client.infer(name, inputs, { stream: streamed }).pipe(map(plain));
  return { envelope, stream: outputs, deltas: outputs };
}

/** The pipeline or ensemble `name` (a pipeline first, as OpenAI's routes name pipelines). */
function resolve(client: EngineClient, name: string): ModelInfo {
  try {
    return client.resolve(name, ['pipeline', 'ensemble']);
  } catch (error) {
    if (!(error instanceof ChorusError) || error.code !== 'CHORUS_NOT_FOUND') throw error;
    const names = [...new Set([...client.models('pipeline'), ...client.models('ensemble')].map((m) => m.name))];
    throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; generate serves pipelines and ensembles: ${names.sort().join(', ')}`, { param: 'model', value: name });
  }
}

/** A pipeline's fields: the sampling ones as the OpenAI routes map them, the others as given (nulls dropped). */
function textFields(all: Record<string, unknown>): TextRequest {
  const others = Object.entries(all).filter(([field, value]) => value !== null && !(SAMPLING_FIELDS as string[]).includes(field));
  return { ...Object.fromEntries(others), ...samplingOf(all) };
}

/** Outputs as JSON values: a one-element tensor as its element, else its elements. */
function plain(outputs: TensorRecord): Record<string, unknown> {
  return Object.fromEntries(Object.entries(outputs).map(([name, t]) => [name, t.data.length === 1 ? t.data[0] : t.data]));
}

