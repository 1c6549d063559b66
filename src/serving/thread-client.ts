/**
 * The engine client across threads: `hostClient` serves a client (the one that owns the engines) to
 * another thread over a MessagePort, and `ThreadClient` is that client on the other thread, so that
 * protocol servers can run on threads of their own while every engine stays on one. Text and tensor
 * requests, cancellation and model control cross as calls and streams (channel.ts); what the interface
 * answers at once (names, states, random weights, tokenizers) is answered from a snapshot that the
 * host's `ClientSnapshots` (one for every thread it serves) sends each thread when it changes: looked
 * at every `snapshotMs`, and before a load, unload or reload returns. Finished requests
 * (`requestsDone`) and the engines' stats stay on the host's thread, where its metrics record them.
 */
import type { MessagePort } from 'node:worker_threads';
import { NEVER, type Observable } from 'rxjs';
import { ChorusError } from '../errors.ts';
import { Channel, type ChannelHandlers } from './channel.ts';
import type { EngineClient, ModelInfo, ModelKind, ModelStats, PipelineUpdate, RequestDone, TensorRecord, TextRequest, TokenizerInfo } from './engine-client.ts';

const ALL_KINDS: readonly ModelKind[] = ['pipeline', 'ensemble', 'model'];

/** What the host's client answers at once, as of when it was taken. */
export interface ClientSnapshot {
  models: ModelInfo[];
  /** Names (of every kind) that run a model on seeded random weights. */
  randomWeights: string[];
  tokenizers: TokenizerInfo[];
  source: string;
}

/**
 * The host's snapshots, taken once for every thread it serves: each new one (a model's state changed,
 * say) goes to every subscriber. A snapshot that cannot be taken (the repository changing under a
 * poll) leaves the last one standing; `onError` hears why.
 */
export class ClientSnapshots {
  private last = '';
  private current: ClientSnapshot | undefined;
  private readonly subscribers = new Set<(snapshot: ClientSnapshot) => void>();
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly onError: (error: unknown) => void;

  constructor(
    private readonly client: EngineClient,
    options: { snapshotMs?: number; onError?: (error: unknown) => void } = {},
  ) {
    this.onError = options.onError ?? (() => {});
    this.refresh();
    this.timer = setInterval(() => this.refresh(), options.snapshotMs ?? 100);
    this.timer.unref();
  }

  /** The latest snapshot (taken now if none could be yet). */
  get snapshot(): ClientSnapshot {
    return this.current ?? this.take();
  }

  /** Calls `send` with every new snapshot (the latest first); returns the function that stops it. */
  subscribe(send: (snapshot: ClientSnapshot) => void): () => void {
    this.subscribers.add(send);
    send(this.snapshot);
    return () => this.subscribers.delete(send);
  }

  /** Takes a snapshot now and sends it where it changed. */
  refresh(): void {
    let snapshot: ClientSnapshot;
    try {
      snapshot = this.take();
    } catch (error) {
      this.onError(error);
      return;
    }
    const json = JSON.stringify(snapshot, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value));
    if (json === this.last) return;
    this.last = json;
    this.current = snapshot;
    for (const send of this.subscribers) send(snapshot);
  }

  close(): void {
    clearInterval(this.timer);
    this.subscribers.clear();
  }

  private take(): ClientSnapshot {
    const models = this.client.models();
    return { models, randomWeights: models.filter((m) => this.client.randomWeights(m.name)).map((m) => m.name), tokenizers: this.client.tokenizers(), source: this.client.source };
  }
}

export interface HostedClient {
  /** The channel to the other thread (more calls may be added to its handlers by the caller). */
  readonly channel: Channel;
  /** Stops serving: the other thread's open requests fail with CHORUS_CLOSED, ours are cancelled. */
  close(): void;
}

/**
 * Serves `client` over `port`: the other end's ThreadClient, its snapshots from `snapshots` (shared by
 * every thread the host serves; a load, unload or reload refreshes them for all before it returns).
 * `calls` adds calls the other end may make (beyond the client's own).
 */
export function hostClient(client: EngineClient, port: MessagePort, snapshots: ClientSnapshots, options: { calls?: ChannelHandlers['calls'] } = {}): HostedClient {
  const control = (run: (model: string) => Promise<void>) => async (model: string): Promise<void> => {
    try {
      await run(model);
    } finally {
      snapshots.refresh();
    }
  };
  const channel: Channel = new Channel(port, {
    calls: {
      ...options.calls,
      load: control((model) => client.load(model)),
      unload: control((model) => client.unload(model)),
      reload: control((model) => client.reload(model)),
    },
    streams: {
      generate: (pipeline: string, request: TextRequest) => client.generate(pipeline, request),
      infer: (name: string, inputs: TensorRecord, stream: boolean | undefined) => client.infer(name, inputs, stream === undefined ? {} : { stream }),
    },
  });
  const unsubscribe = snapshots.subscribe((snapshot) => channel.push('snapshot', snapshot));
  return {
    channel,
    close: () => {
      unsubscribe();
      channel.close();
    },
  };
}

/** The host's client, on this thread. */
export class ThreadClient implements EngineClient {
  /** Finished requests are recorded on the host's thread. */
  readonly requestsDone: Observable<RequestDone> = NEVER;
  private constructor(
    readonly channel: Channel,
    private snapshot: ClientSnapshot,
  ) {}

  /**
   * The client served over `port`, once the host's first snapshot (sent at once) is in. `calls`: calls
   * the host may make of this thread.
   */
  static connect(port: MessagePort, calls: ChannelHandlers['calls'] = {}): Promise<ThreadClient> {
    return new Promise<ThreadClient>((resolve) => {
      let client: ThreadClient | undefined;
      const channel = new Channel(port, {
        calls,
        pushes: {
          snapshot: (value: ClientSnapshot) => {
            if (client !== undefined) client.snapshot = value;
            else resolve((client = new ThreadClient(channel, value)));
          },
        },
      });
    });
  }

  get source(): string {
    return this.snapshot.source;
  }

  models(kind?: ModelKind): ModelInfo[] {
    return kind === undefined ? this.snapshot.models : this.snapshot.models.filter((m) => m.kind === kind);
  }

  resolve(name: string, kinds: readonly ModelKind[] = ALL_KINDS): ModelInfo {
    for (const kind of kinds) {
      const found = this.snapshot.models.find((m) => m.kind === kind && m.name === name);
      if (found !== undefined) return found;
    }
    const names = [...new Set(this.snapshot.models.filter((m) => kinds.includes(m.kind)).map((m) => m.name))].sort();
    throw new ChorusError('CHORUS_NOT_FOUND', `unknown model ${name}; there are: ${names.join(', ') || 'none'}`, { param: 'model', value: name });
  }

  generate(pipeline: string, request: TextRequest): Observable<PipelineUpdate> {
    return this.channel.subscribe<PipelineUpdate>('generate', pipeline, request);
  }

  infer(name: string, inputs: TensorRecord, options: { stream?: boolean } = {}): Observable<TensorRecord> {
    return this.channel.subscribe<TensorRecord>('infer', name, inputs, options.stream);
  }

  load(model: string): Promise<void> {
    return this.channel.call('load', model);
  }

  unload(model: string): Promise<void> {
    return this.channel.call('unload', model);
  }

  reload(model: string): Promise<void> {
    return this.channel.call('reload', model);
  }

  randomWeights(name: string): boolean {
    return this.snapshot.randomWeights.includes(name);
  }

  tokenizers(): TokenizerInfo[] {
    return this.snapshot.tokenizers;
  }

  /** The engines' stats are the host thread's (its metrics read them there). */
  stats(): ModelStats[] {
    return [];
  }

  /** Closes this end only: the host's client and its engines stay. */
  async close(): Promise<void> {
    this.channel.close();
  }
}
