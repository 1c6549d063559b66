/**
 * A pipeline: a text-level service over an ensemble. Request fields (the names of Triton's generate
 * extension and OpenAI's API: text_input, max_tokens, temperature, top_p, top_k, stop, seed, ...) become
 * ensemble input tensors, with the pipeline's defaults; chat messages go through a Jinja chat template
 * first. The result is a stream of updates whose deltas join to the final text; stop strings are matched
 * on that text across token boundaries, and reaching one ends the request (and its generation).
 *
 * A model pipeline (`model:` + `tokenizer:`) needs no ensemble: it runs tokenize -> generate ->
 * detokenize, built here, and maps the standard fields onto FasterTransformer's decoding inputs.
 */
import { Template } from '@huggingface/jinja';
import { catchError, Observable, throwError, type Subscription } from 'rxjs';
import { LIST_FIELDS, STANDARD_FIELDS, type EnsembleDefinition, type PipelineDefinition, type TensorSpec } from '../config/index.ts';
import { CompiledEnsemble, type ModelStore, type Tensor, type TensorRecord } from '../ensemble/index.ts';
import { ChorusError, invalidArgument, renamed } from '../errors.ts';
import { StopStringMatcher } from '../generation/core/index.ts';
import { runDirect, runsDirect, type DirectModel } from './direct-run.ts';
import type { Tokenizer } from '../tokenizers/index.ts';

export interface ChatMessage {
  role: string;
  content: string;
}

/** A text request: standard fields, or any field the pipeline maps. */
export interface TextRequest {
  text_input?: string;
  messages?: ChatMessage[];
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  /** An integer in [0, 2^64 - 1]; beyond 2^53, a bigint (exact). */
  seed?: number | bigint;
  stop?: string | string[];
  beam_width?: number;
  n?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  min_tokens?: number;
  len_penalty?: number;
  logprobs?: boolean;
  top_logprobs?: number;
  /** Factual-nucleus sampling: top_p is multiplied by this after each token. */
  top_p_decay?: number;
  /** ...but not below this. */
  top_p_min?: number;
  /** ...and reset to top_p after one of these token ids. */
  top_p_reset_ids?: number[];
  /** false: the caller reads only the final answer, so the engine may generate it in one device run. Default: true. */
  stream?: boolean;
  [field: string]: unknown;
}

/** A generated token with its log-probability (and, when asked, its step's most likely alternatives). */
export interface TokenLogProb {
  token: number;
  text: string;
  logprob: number;
  top: Array<{ token: number; text: string; logprob: number }>;
}

/** One returned text. `delta` is what this update adds to `text`. */
export interface TextChoice {
  index: number;
  text: string;
  delta: string;
  /** With `logprobs`: the tokens generated since the last update. */
  logprobs?: TokenLogProb[];
  /** On the last update: `end_id`, `length` or `stop` (a stop word or string). */
  finishReason?: string;
}

export interface PipelineUpdate {
  choices: TextChoice[];
  /** On the last update, where the pipeline knows them. */
  usage?: { promptTokens: number; completionTokens: number };
}

/** Standard field -> the generate input it fills. */
const STANDARD_PORTS: Record<string, string> = Object.fromEntries(Object.entries(STANDARD_FIELDS).map(([field, [port]]) => [field, port]));

/** Fields every pipeline takes itself (not mapped to tensors). */
const OWN_FIELDS = new Set(['text_input', 'messages', 'stop', 'stream']);

export class Pipeline {
  private template: { source: string; parsed: Template } | undefined;
  private compiled: Promise<{ ensemble: CompiledEnsemble; fields: Record<string, string>; textOutput: string; seq2seq: boolean; chatTemplate: string | undefined; specials: Record<string, string>; readsSpecialText: boolean; tokenizer: Tokenizer | undefined; direct: DirectModel | undefined; promptBound: PromptBound | undefined }> | undefined;

  constructor(
    readonly name: string,
    readonly definition: PipelineDefinition,
    private readonly store: ModelStore,
  ) {}

  /** Runs a request; the stream's updates carry deltas, and the last one the finish reasons. */
  run(request: TextRequest): Observable<PipelineUpdate> {
    return this.running(request).pipe(catchError((error: unknown) => throwError(() => this.inRequestTerms(error))));
  }

  private running(request: TextRequest): Observable<PipelineUpdate> {
    // Chat needs a template: said before anything loads (a model pipeline's model takes seconds to).
    if (request.messages !== undefined && this.definition.chat_template === undefined) {
      return throwError(() => noChatTemplate(this.name));
    }
    return new Observable<PipelineUpdate>((subscriber) => {
      let upstream: Subscription | undefined;
      let closed = false;
      void this.prepare()
        .then((compiled) => {
          if (closed) return;
          const { inputs, stops } = this.inputs(request, compiled);
          if (compiled.direct !== undefined && runsDirect(inputs)) {
            upstream = runDirect(compiled.direct, inputs, stops, request.stream !== false).subscribe(subscriber);
            return;
          }
          const texts: string[] = [];
          const matchers: StopStringMatcher[] = [];
          const stopped: boolean[] = [];
          let last: TensorRecord = {};
          const update = (record: TensorRecord): PipelineUpdate => {
            const text = record[compiled.textOutput];
            const choices: TextChoice[] = [];
            (text?.data as string[] | undefined)?.forEach((snapshot, index) => {
              matchers[index] ??= new StopStringMatcher(stops);
              const fresh = snapshot.slice((texts[index] ?? '').length);
              texts[index] = snapshot;
              stopped[index] ??= false;
              if (stopped[index]) return;
              const { text: delta, stopped: hit } = matchers[index]!.push(fresh);
              stopped[index] = hit;
              const logprobs = tokenLogProbs(record, index);
              choices.push({ index, text: '', delta, ...(logprobs === undefined ? {} : { logprobs }) });
            });
            return { choices };
          };
          // Tokens already reported per choice, with their log-probabilities.
          const reported: number[] = [];
          const tokenLogProbs = (record: TensorRecord, index: number): TokenLogProb[] | undefined => {
            const logProbs = record.output_log_probs;
            const ids = record.output_ids;
            if (logProbs === undefined || ids === undefined || compiled.tokenizer === undefined) return undefined;
            const tokenizer = compiled.tokenizer;
            const width = ids.shape[2] ?? 0;
            const generated = logProbs.shape[2] ?? 0;
            const length = (record.sequence_length?.data[index] as number | undefined) ?? width;
            const prompt = compiled.seq2seq ? 0 : ((record.input_lengths?.data[0] as number | undefined) ?? 0);
            const count = Math.min(length - prompt, generated);
            const tops = record.top_log_probs;
            const topIds = record.top_log_prob_ids;
            const k = tops?.shape[3] ?? 0;
            const row = ids.data.slice(index * width, index * width + Math.min(length, width)) as number[];
            // A token's text is what it adds after the tokens before it (a piece keeps its leading space).
            const pieceText = (position: number, id: number): string => {
              if (id >= tokenizer.vocabSize) return '';
              const context = row.slice(Math.max(0, position - 6), position).filter((t) => t < tokenizer.vocabSize);
              const before = tokenizer.decode(context);
              const after = tokenizer.decode([...context, id]);
              return after.startsWith(before) ? after.slice(before.length) : tokenizer.decode([id]);
            };
            const out: TokenLogProb[] = [];
            for (let i = reported[index] ?? 0; i < count; i++) {
              const position = prompt + i;
              const token = row[position]!;
              const top: TokenLogProb['top'] = [];
              for (let j = 0; j < k; j++) {
                const at = (index * generated + i) * k + j;
                const alternative = topIds!.data[at] as number;
                top.push({ token: alternative, text: pieceText(position, alternative), logprob: tops!.data[at] as number });
              }
              out.push({ token, text: pieceText(position, token), logprob: logProbs.data[index * generated + i] as number, top });
            }
            reported[index] = Math.max(reported[index] ?? 0, count);
            return out;
          };
          const emitted: string[] = [];
          const send = (u: PipelineUpdate): void => {
            for (const c of u.choices) {
              emitted[c.index] = (emitted[c.index] ?? '') + c.delta;
              c.text = emitted[c.index]!;
            }
            subscriber.next(u);
          };
          upstream = compiled.ensemble.run(inputs, { stream: request.stream !== false }).subscribe({
            next: (record) => {
              last = record;
              const u = update(record);
              const moved = u.choices.filter((c) => c.delta !== '' || (c.logprobs?.length ?? 0) > 0);
              if (moved.length > 0) send({ choices: moved });
              if (stopped.length > 0 && stopped.every(Boolean)) {
                upstream?.unsubscribe();
                finish();
              }
            },
            error: (error: unknown) => subscriber.error(error),
            complete: () => finish(),
          });
          function finish(): void {
            if (closed) return;
            closed = true;
            const reasons = last.finish_reason?.data as string[] | undefined;
            const count = Math.max(texts.length, reasons?.length ?? 0, 1);
            const choices: TextChoice[] = Array.from({ length: count }, (_, index) => {
              const held = stopped[index] ? '' : (matchers[index]?.flush() ?? '');
              return { index, text: '', delta: held, finishReason: stopped[index] ? 'stop' : reasons?.[index] || 'length' };
            });
            const final: PipelineUpdate = { choices };
            const lengths = last.sequence_length?.data as number[] | undefined;
            const promptTokens = (last.input_lengths?.data as number[] | undefined)?.[0];
            if (lengths !== undefined && promptTokens !== undefined) {
              const generated = lengths.reduce((sum, n) => sum + n - (compiled.seq2seq ? 0 : promptTokens), 0);
              final.usage = { promptTokens, completionTokens: generated };
            }
            send(final);
            subscriber.complete();
          }
        })
        .catch((error: unknown) => subscriber.error(error));
      return () => {
        closed = true;
        upstream?.unsubscribe();
      };
    });
  }

  /**
   * An error as the request's fields name things: an input the pipeline maps a field to (runtime_top_k,
   * request_output_len, ...) is named as the field (top_k, max_tokens, ...).
   */
  private inRequestTerms(error: unknown): unknown {
    if (!(error instanceof ChorusError) || error.param === undefined) return error;
    const fields = this.definition.model !== undefined ? STANDARD_PORTS : (this.definition.fields ?? {});
    const port = /^[A-Za-z_][\w]*/.exec(error.param)?.[0];
    const field = Object.entries(fields).find(([f, p]) => p === port && f !== p)?.[0];
    return port === undefined || field === undefined ? error : renamed(error, port, field);
  }

  /** The ensemble (built for a model pipeline), compiled once. */
  private prepare(): NonNullable<Pipeline['compiled']> {
    if (this.compiled === undefined) {
      const compiling = this.compile();
      // A failed compile is forgotten, so the next request tries again.
      compiling.catch(() => {
        if (this.compiled === compiling) this.compiled = undefined;
      });
      this.compiled = compiling;
    }
    return this.compiled;
  }

  private async compile(): NonNullable<Pipeline['compiled']> {
    const d = this.definition;
    const repository = this.store.repository;
    let tokenizerName: string | undefined;
    let ensemble: CompiledEnsemble;
    let fields: Record<string, string>;
    let textOutput: string;
    let seq2seq = false;
    let context: number | undefined;
    if (d.model !== undefined) {
      const model = await this.store.model(d.model);
      seq2seq = model.engine === 'generate' && model.seq2seq;
      if (model.engine === 'generate' && !seq2seq) context = model.outputRoom(0);
      tokenizerName = d.tokenizer ?? repository.models.get(d.model)?.value.tokenizer;
      if (tokenizerName === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `pipeline ${this.name}: model ${d.model} names no tokenizer; give the pipeline one`);
      ensemble = new CompiledEnsemble(`${this.name} (model pipeline)`, modelEnsemble(d.model, tokenizerName, seq2seq), this.store);
      fields = { text_input: 'text_input', ...Object.fromEntries(Object.entries(STANDARD_FIELDS).map(([field, [port]]) => [field, port])) };
      textOutput = 'text_output';
    } else {
      const definition = repository.ensembles.get(d.ensemble!);
      if (definition === undefined) throw new ChorusError('CHORUS_NOT_FOUND', `pipeline ${this.name}: no ensemble named ${d.ensemble}`);
      ensemble = new CompiledEnsemble(d.ensemble!, definition.value, this.store);
      fields = d.fields ?? {};
      const bytes = Object.entries(definition.value.outputs).filter(([, spec]) => spec.datatype === 'BYTES').map(([name]) => name);
      textOutput = d.text_output ?? ('text_output' in definition.value.outputs ? 'text_output' : bytes.length === 1 ? bytes[0]! : '');
      if (!(textOutput in definition.value.outputs)) throw new ChorusError('CHORUS_CONFIG_INVALID', `pipeline ${this.name}: say which output of ensemble ${d.ensemble} holds the text (text_output); its BYTES outputs: ${bytes.join(', ')}`);
      tokenizerName = definition.value.steps.find((s) => s.tokenize !== undefined)?.tokenize;
    }
    let chatTemplate = d.chat_template;
    const specials: Record<string, string> = {};
    let readsSpecialText = true;
    if (tokenizerName !== undefined) {
      const tokenizer = await this.store.tokenizer(tokenizerName);
      readsSpecialText = tokenizer.kind === 'huggingface' || tokenizer.kind === 'tiktoken';
      if (chatTemplate === 'tokenizer') chatTemplate = tokenizer.chatTemplate;
      for (const [key, id] of [['bos_token', tokenizer.specialTokens.bos], ['eos_token', tokenizer.specialTokens.eos]] as const) {
        if (id !== undefined) specials[key] = tokenizer.decode([id]);
      }
    } else if (chatTemplate === 'tokenizer') chatTemplate = undefined;
    const tokenizer = tokenizerName === undefined ? undefined : await this.store.tokenizer(tokenizerName);
    const direct = d.model !== undefined && tokenizer !== undefined ? { store: this.store, model: d.model, tokenizer, ensemble } : undefined;
    return { ensemble, fields, textOutput, seq2seq, chatTemplate, specials, readsSpecialText, tokenizer, direct, promptBound: context === undefined || tokenizer === undefined ? undefined : promptBound(d.model!, context, tokenizer) };
  }

  /** The request as ensemble input tensors, and its stop strings. */
  private inputs(request: TextRequest, compiled: Awaited<NonNullable<Pipeline['compiled']>>): { inputs: Record<string, Tensor>; stops: string[] } {
    if (typeof request !== 'object' || request === null) throw invalidArgument('request', 'an object of fields', request);
    const specs = compiled.ensemble.definition.inputs;
    const merged: Record<string, unknown> = { ...(this.definition.defaults ?? {}), ...request };
    // One text unless n asks for more (a generate step otherwise returns every beam, as FT does).
    if ('n' in compiled.fields) merged.n ??= 1;
    for (const field of Object.keys(request)) {
      if (!OWN_FIELDS.has(field) && !(field in compiled.fields)) {
        const known = [...new Set([...OWN_FIELDS, ...Object.keys(compiled.fields)])];
        throw new ChorusError('CHORUS_INVALID_ARGUMENT', `pipeline ${this.name} takes no field ${field}; it takes: ${known.join(', ')}`, { param: field });
      }
    }
    const inputs: Record<string, Tensor> = {};
    let text = merged.text_input;
    if (merged.messages !== undefined) {
      if (text !== undefined && request.text_input !== undefined) throw new ChorusError('CHORUS_INVALID_ARGUMENT', 'give text_input or messages, not both', { param: 'messages' });
      text = this.renderChat(merged.messages, compiled.chatTemplate, compiled.specials);
      // The template writes the special tokens. Tokenizers that read special-token text (huggingface,
      // tiktoken) take it as it is; for the others, a leading BOS text becomes the BOS they add.
      let add = false;
      const bos = compiled.specials.bos_token;
      if (!compiled.readsSpecialText && bos !== undefined && (text as string).startsWith(bos)) {
        text = (text as string).slice(bos.length);
        add = true;
      }
      if ('add_special_tokens' in specs) inputs.add_special_tokens = { datatype: 'BOOL', shape: [1, 1], data: [add] };
    }
    if (typeof text !== 'string') throw invalidArgument('text_input', 'a string (or give messages)', text);
    // A text that cannot fit is refused before it is tokenized (which would hold the event loop).
    const bound = compiled.promptBound;
    if (bound !== undefined && text.length > bound.bytes / 3 && Buffer.byteLength(text) > bound.bytes) {
      throw new ChorusError('CHORUS_CANNOT_FIT', `the prompt is ${Buffer.byteLength(text)} bytes of text, more than fit the context of model ${bound.model} (${bound.context} tokens, at most ${bound.bytes} bytes)`, { param: 'prompt' });
    }
    const textTensor = compiled.fields.text_input;
    if (textTensor === undefined) throw new ChorusError('CHORUS_CONFIG_INVALID', `pipeline ${this.name} maps no field to the text (fields.text_input)`);
    for (const [field, tensorName] of Object.entries(compiled.fields)) {
      const value = field === 'text_input' ? text : merged[field];
      if (value === undefined) continue;
      const spec = specs[tensorName];
      if (spec === undefined) continue;
      inputs[tensorName] = toTensor(field, value, spec);
      if (field === 'max_tokens' && request.max_tokens === undefined) inputs[tensorName].isDefault = true;
    }
    const stop = merged.stop ?? [];
    const stops = typeof stop === 'string' ? [stop] : stop;
    if (!Array.isArray(stops) || stops.some((s) => typeof s !== 'string' || s === '')) throw invalidArgument('stop', 'a non-empty string or a list of them', stop);
    return { inputs, stops: stops as string[] };
  }

  private renderChat(messages: unknown, template: string | undefined, specials: Record<string, string>): string {
    if (template === undefined) throw noChatTemplate(this.name);
    if (!Array.isArray(messages) || messages.length === 0) throw invalidArgument('messages', 'a non-empty list of {role, content}', messages);
    messages.forEach((m: unknown, i) => {
      const message = m as Partial<ChatMessage> | null;
      if (typeof message !== 'object' || message === null || typeof message.role !== 'string' || typeof message.content !== 'string') {
        throw invalidArgument(`messages[${i}]`, 'an object with string role and content', m);
      }
    });
    // Parsed once: a template is the pipeline's (or its tokenizer's) for as long as the pipeline lives.
    if (this.template?.source !== template) this.template = { source: template, parsed: new Template(template) };
    return this.template.parsed.render({ messages, add_generation_prompt: true, ...specials });
  }
}

/** The most bytes of text a prompt may have: past them it cannot fit the model's context. */
interface PromptBound {
  model: string;
  context: number;
  bytes: number;
}

/** Each tokenizer's most bytes of text one id spells (undefined where ids do not spell the text out). */
const bytesPerId = new WeakMap<Tokenizer, number | undefined>();

/**
 * For tokenizers whose ids spell out the text's bytes (byte-level BPE, tiktoken, llama2.c: no
 * normalizer drops or folds text), a prompt of more than context x the longest id's bytes cannot fit;
 * 4x that leaves room for a Unicode normalization that composes characters. SentencePiece models may
 * fold whitespace, so they have no such bound.
 */
function promptBound(model: string, context: number, tokenizer: Tokenizer): PromptBound | undefined {
  if (!bytesPerId.has(tokenizer)) {
    let most: number | undefined;
    if (tokenizer.tokenBytes !== undefined || tokenizer.kind === 'llama2c') {
      most = 1;
      for (let id = 0; id < tokenizer.vocabSize; id++) {
        let bytes: number;
        try {
          bytes = tokenizer.tokenBytes?.(id).length ?? Buffer.byteLength(tokenizer.decode([id])) + 1;
        } catch {
          // An id that decodes to no bytes of its own (a special one): its text, where it has one.
          bytes = Buffer.byteLength(tokenizer.decode([id])) + 1;
        }
        most = Math.max(most, bytes);
      }
    }
    bytesPerId.set(tokenizer, most);
  }
  const most = bytesPerId.get(tokenizer);
  return most === undefined ? undefined : { model, context, bytes: 4 * context * most };
}

/** Chat messages sent to a pipeline without a chat template. */
function noChatTemplate(pipeline: string): ChorusError {
  return new ChorusError('CHORUS_INVALID_ARGUMENT', `pipeline ${pipeline} has no chat template: send the text as a prompt (POST /v1/completions, or text_input on generate)`, { param: 'messages' });
}

/** A request value as a tensor of the input's spec ([1, ...dims], -1 read as 1). */
function toTensor(field: string, value: unknown, spec: TensorSpec): Tensor {
  if (Array.isArray(value) && spec.datatype !== 'BYTES') {
    if (spec.dims.length !== 1 || spec.dims[0] !== -1) throw new ChorusError('CHORUS_CONFIG_INVALID', `field ${field} maps to an input of shape [${spec.dims.join(', ')}], which a list cannot fill`);
    return { datatype: spec.datatype, shape: [1, value.length], data: value.map((v: unknown, i) => toTensor(`${field}[${i}]`, v, { ...spec, dims: [1] }).data[0]!) };
  }
  const shape = [1, ...spec.dims.map((d) => (d === -1 ? 1 : d))];
  let element: string | number | boolean | bigint;
  if (spec.datatype === 'BYTES') {
    if (Array.isArray(value) && value.every((v) => typeof v === 'string')) element = value.map((v: string) => `"${v.replace(/"/g, '""')}"`).join(',');
    else if (typeof value === 'string') element = value;
    else throw invalidArgument(field, 'a string', value);
  } else if (spec.datatype === 'BOOL') {
    if (typeof value !== 'boolean') throw invalidArgument(field, 'true or false', value);
    element = value;
  } else if (typeof value === 'bigint' && /^U?INT64$/.test(spec.datatype)) {
    element = value;
  } else {
    if (typeof value !== 'number' || !Number.isFinite(value)) throw invalidArgument(field, 'a number', value);
    if (/INT/.test(spec.datatype) && (!Number.isInteger(value) || (spec.datatype.startsWith('U') && value < 0))) {
      throw invalidArgument(field, spec.datatype.startsWith('U') ? 'a non-negative integer' : 'an integer', value);
    }
    element = value;
  }
  if (shape.reduce((a, b) => a * b, 1) !== 1) throw new ChorusError('CHORUS_CONFIG_INVALID', `field ${field} maps to an input of shape [${spec.dims.join(', ')}], which one value cannot fill`);
  return { datatype: spec.datatype, shape, data: [element] };
}

/** The ensemble a model pipeline runs: tokenize -> generate -> detokenize, with every decoding input optional. */
function modelEnsemble(model: string, tokenizer: string, seq2seq: boolean): EnsembleDefinition {
  const inputs: EnsembleDefinition['inputs'] = {
    text_input: { datatype: 'BYTES', dims: [1] },
    add_special_tokens: { datatype: 'BOOL', dims: [1], optional: true },
  };
  const generateInputs: Record<string, string> = { input_ids: '_ids', input_lengths: 'input_lengths' };
  for (const [field, [port, datatype]] of Object.entries(STANDARD_FIELDS)) {
    inputs[port] = { datatype, dims: [LIST_FIELDS.has(field) ? -1 : 1], optional: port !== 'request_output_len' };
    generateInputs[port] = port;
  }
  // A pipeline without max_tokens still answers: 16 tokens, the engine's default, unless defaults say.
  inputs.request_output_len!.optional = true;
  return {
    inputs,
    outputs: {
      text_output: { datatype: 'BYTES', dims: [-1] },
      finish_reason: { datatype: 'BYTES', dims: [-1] },
      sequence_length: { datatype: 'INT32', dims: [-1] },
      input_lengths: { datatype: 'UINT32', dims: [1] },
      cum_log_probs: { datatype: 'FP32', dims: [-1], optional: true },
      output_ids: { datatype: 'INT32', dims: [-1, -1], tensor: '_out' },
      output_log_probs: { datatype: 'FP32', dims: [-1, -1], optional: true },
      top_log_probs: { datatype: 'FP32', dims: [-1, -1, -1], optional: true },
      top_log_prob_ids: { datatype: 'UINT32', dims: [-1, -1, -1], optional: true },
    },
    steps: [
      { name: 'tokenize', tokenize: tokenizer, inputs: { text: 'text_input', add_special_tokens: 'add_special_tokens' }, outputs: { input_ids: '_ids', input_lengths: 'input_lengths' } },
      { name: 'generate', generate: model, inputs: generateInputs, outputs: {
          output_ids: '_out',
          sequence_length: 'sequence_length',
          finish_reason: 'finish_reason',
          cum_log_probs: 'cum_log_probs',
          output_log_probs: 'output_log_probs',
          top_log_probs: 'top_log_probs',
          top_log_prob_ids: 'top_log_prob_ids',
        },
      },
      {
        name: 'detokenize',
        detokenize: tokenizer,
        inputs: seq2seq ? { output_ids: '_out', sequence_length: 'sequence_length' } : { output_ids: '_out', sequence_length: 'sequence_length', input_lengths: 'input_lengths' },
        outputs: { text: 'text_output' },
      },
    ],
  };
}
