/**
 * The engine client: the one interface between a protocol server (HTTP routes, gRPC services, metrics,
 * the playground) and everything below it (pipelines, ensembles, the model store, the engines), as
 * vLLM's EngineClient is for its entrypoints. A server sees names, their kinds and state, streams of
 * text updates, tensors, model control and stats; never a repository, a store or an engine.
 *
 * Streams are cold: work starts on subscription, and unsubscribing (the client left, a timeout) cancels
 * it down to the engine, which frees the sequence's batch slot within one decode step. A request that
 * cannot start (unknown name, bad field, full queue) fails its stream with a ChorusError whose code and
 * status the protocol maps to its own error shape.
 */
import type { Observable } from 'rxjs';
import type { Datatype } from '../config/index.ts';
import type { Element, Tensor, TensorRecord } from '../ensemble/index.ts';
import type { RequestMetrics } from '../generation/index.ts';
import type { ChatMessage, PipelineUpdate, TextChoice, TextRequest, TokenLogProb } from '../pipeline/index.ts';

export type { ChatMessage, Datatype, Element, PipelineUpdate, RequestMetrics, Tensor, TensorRecord, TextChoice, TextRequest, TokenLogProb };

/** What a name is: a text pipeline, a tensor-level ensemble, or a model of the store. */
export type ModelKind = 'pipeline' | 'ensemble' | 'model';

/** A model's state, as Triton's repository index reports it (pipelines and ensembles are always READY). */
export type ModelState = 'READY' | 'LOADING' | 'UNAVAILABLE';

/** A tensor a name takes or gives, as KServe's metadata shows it (the batch dimension first, -1). */
export interface TensorInfo {
  name: string;
  datatype: Datatype;
  shape: number[];
  optional: boolean;
}

/** One step of an ensemble: its kind, what it names (a tokenizer, a model, a script) and its wiring. */
export interface StepInfo {
  name: string;
  kind: string;
  target: string;
  inputs: Record<string, string>;
  outputs: Record<string, string>;
}

/** Everything a server may say about a name. */
export interface ModelInfo {
  name: string;
  kind: ModelKind;
  /** Always '1': definitions have one version. */
  version: string;
  /** KServe's platform: `pipeline`, `ensemble`, or `chorus_<engine>` for a model. */
  platform: string;
  state: ModelState;
  description: string | null;
  inputs: TensorInfo[];
  outputs: TensorInfo[];
  /** The definition as written (what `/config` answers), JSON-safe. */
  config: Record<string, unknown>;
  /** A pipeline's ensemble or model, and whether it takes chat messages. */
  pipeline?: { ensemble?: string; model?: string; chat: boolean };
  /** An ensemble's steps, in file order. */
  steps?: StepInfo[];
  /** A model's engine (`generate`, `encode`, `forward`) and device. */
  model?: { engine: string; device: string };
  /**
   * Runs a model on seeded random weights (its source was not at hand and the definition names a
   * fallback): what it answers is noise. Before a model loads, what it will do on its first load.
   */
  randomWeights: boolean;
}

/** A tokenizer of the repository, and the one serving in its place when its files were missing. */
export interface TokenizerInfo {
  name: string;
  type: string;
  fallbackInUse: string | null;
}

/** How one loaded generation model is doing now. */
export interface ModelStats {
  name: string;
  /** Requests in the running batch. */
  running: number;
  /** Requests waiting to join it. */
  waiting: number;
  /** Batches run through the GreedySearch fast path since it loaded. */
  greedySearchRuns: number;
  /** Prefill steps (each admits a group of waiting requests), decode steps, and rows over all decode steps, since it loaded. */
  prefillSteps: number;
  decodeSteps: number;
  decodedRows: number;
  /** Requests finished (cancelled ones included) and cancelled, and tokens generated, since it loaded. */
  requestsFinished: number;
  requestsCancelled: number;
  tokensGenerated: number;
}

/** One finished generation request of a model, with its timings. */
export interface RequestDone {
  model: string;
  metrics: RequestMetrics;
}

export interface EngineClient {
  /** Every name, each kind's names in name order (pipelines, ensembles, models), optionally one kind. */
  models(kind?: ModelKind): ModelInfo[];
  /**
   * The name as the first of `kinds` that has it (default: pipeline, ensemble, model). An unknown name
   * throws CHORUS_NOT_FOUND (param `model`) listing the names of those kinds.
   */
  resolve(name: string, kinds?: readonly ModelKind[]): ModelInfo;
  /**
   * Runs a text request on a pipeline: updates carry each choice's delta and text so far; the last one
   * its finish reason and the usage. `request.stream: false` lets the engine produce the tokens in one
   * run (only the last update is read). Fields the pipeline does not take fail with their name.
   */
  generate(pipeline: string, request: TextRequest): Observable<PipelineUpdate>;
  /**
   * Runs tensors through an ensemble (snapshots of its outputs, the last one final) or a pipeline
   * (`text_input` and one-element request fields in; `text_output`, `prompt_tokens`, `completion_tokens`
   * out). Models run inside ensembles: naming one fails with CHORUS_UNSUPPORTED.
   */
  infer(name: string, inputs: TensorRecord, options?: { stream?: boolean }): Observable<TensorRecord>;
  /** Loads a model of the store now (a no-op when loaded); CHORUS_NOT_FOUND for other names. */
  load(model: string): Promise<void>;
  /** Releases a model; requests running on it fail with CHORUS_CLOSED. */
  unload(model: string): Promise<void>;
  /** Unloads and loads again, picking up new files at its source. */
  reload(model: string): Promise<void>;
  /** Whether `name` (a pipeline, ensemble or model) runs a model on seeded random weights; false for unknown names. */
  randomWeights(name: string): boolean;
  /** The repository's tokenizers. */
  tokenizers(): TokenizerInfo[];
  /** The loaded generation models' engine stats. */
  stats(): ModelStats[];
  /** Every generation request that ends, with its model and timings (for metrics). Hot, never completes. */
  readonly requestsDone: Observable<RequestDone>;
  /** Where the names come from (a repository directory), for logs. */
  readonly source: string;
  /** Unloads everything; running requests fail with CHORUS_CLOSED. */
  close(): Promise<void>;
}
