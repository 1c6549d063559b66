/**
 * Prometheus metrics (prom-client, a registry of the server's own): Triton's `nv_inference_*` names
 * where they apply, per model, and token-level histograms from the engines: time to first token,
 * inter-token latency, tokens generated; and prom-client's process metrics (resident memory, open file
 * descriptors, active handles, event-loop lag).
 */
import client, { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { EngineClient, ModelStats, RequestMetrics } from '../serving/index.ts';
import { GapHistogram } from './gap-histogram.ts';

export class Metrics {
  readonly registry = new client.Registry();
  private readonly success = new client.Counter({ name: 'nv_inference_request_success', help: 'Successful inference requests', labelNames: ['model'], registers: [this.registry] });
  private readonly failure = new client.Counter({ name: 'nv_inference_request_failure', help: 'Failed inference requests', labelNames: ['model', 'reason'], registers: [this.registry] });
  private readonly count = new client.Counter({ name: 'nv_inference_count', help: 'Inferences performed', labelNames: ['model'], registers: [this.registry] });
  private readonly duration = new client.Counter({ name: 'nv_inference_request_duration_us', help: 'Cumulative request duration, microseconds', labelNames: ['model'], registers: [this.registry] });
  private readonly queue = new client.Counter({ name: 'nv_inference_queue_duration_us', help: 'Cumulative time generation requests waited in the engine queue, microseconds', labelNames: ['model'], registers: [this.registry] });
  private readonly pending = new client.Gauge({ name: 'nv_inference_pending_request_count', help: 'Requests received and not yet answered', labelNames: ['model'], registers: [this.registry] });
  private readonly ttft = new client.Histogram({
    name: 'chorus_time_to_first_token_seconds',
    help: 'From submission to the first generated token',
    labelNames: ['model'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  private readonly itl = new GapHistogram({
    name: 'chorus_inter_token_latency_seconds',
    help: 'Between consecutive generated tokens',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    registers: [this.registry],
  });
  private readonly tokens = new client.Histogram({
    name: 'chorus_generated_tokens',
    help: 'Tokens generated per request',
    labelNames: ['model'],
    buckets: [1, 4, 16, 64, 256, 1024, 4096],
    registers: [this.registry],
  });

  /** Where `text()` gets its exposition from instead (an HTTP thread: the whole server's, aggregated). */
  private source: (() => Promise<string>) | undefined;

  private readonly httpThread: boolean;

  /**
   * `httpThread`: the registry of an HTTP thread (`chorus serve --http-threads`), which counts its own
   * requests only: the process metrics and the engines' gauges are the main thread's.
   */
  constructor(options: { httpThread?: boolean } = {}) {
    this.httpThread = options.httpThread ?? false;
    if (!this.httpThread) client.collectDefaultMetrics({ register: this.registry });
  }

  /** `text()` answers what `source` gives (the metrics of every thread, summed where they count the same thing). */
  exposeFrom(source: () => Promise<string>): void {
    this.source = source;
  }

  /** This registry's metrics as data, for `aggregate`. */
  json(): Promise<Array<MetricObjectWithValues<MetricValue<string>>>> {
    return this.registry.getMetricsAsJSON();
  }

  /** The exposition of several threads' registries: counters, histograms and gauges summed by series. */
  static aggregate(registries: Array<Array<MetricObjectWithValues<MetricValue<string>>>>): Promise<string> {
    return AggregatorRegistry.aggregate(registries).metrics();
  }

  /** Engine gauges (running, waiting, batch occupancy) read from the loaded models at each scrape. */
  watch(engines: EngineClient): void {
    if (this.httpThread) return;
    const registry = this.registry;
    const gauge = (name: string, help: string, value: (stats: ModelStats) => number): void => {
      new client.Gauge({
        name,
        help,
        labelNames: ['model'],
        registers: [registry],
        collect() {
          this.reset();
          for (const stats of engines.stats()) this.set({ model: stats.name }, value(stats));
        },
      });
    };
    gauge('chorus_engine_running_requests', 'Requests in the running batch', (s) => s.running);
    gauge('chorus_engine_queue_depth', 'Requests waiting to join the batch', (s) => s.waiting);
    gauge('chorus_engine_greedy_search_runs', 'Batches run through the GreedySearch fast path since the model loaded', (s) => s.greedySearchRuns);
    gauge('chorus_engine_prefill_steps', 'Prefill steps (each admits a group of waiting requests) since the model loaded', (s) => s.prefillSteps);
    gauge('chorus_engine_decode_steps', 'Decode steps since the model loaded', (s) => s.decodeSteps);
    gauge('chorus_engine_decoded_rows', 'Rows over all decode steps since the model loaded', (s) => s.decodedRows);
    gauge('chorus_engine_batch_occupancy', 'Mean rows per decode step since the model loaded', (s) => (s.decodeSteps === 0 ? 0 : s.decodedRows / s.decodeSteps));
  }

  /**
   * Records what `engines` report: their gauges at each scrape, and every request that ends. Returns
   * the function that stops following them.
   */
  follow(engines: EngineClient): () => void {
    this.watch(engines);
    const finished = engines.requestsDone.subscribe(({ model, metrics }) => this.generation(model, metrics));
    return () => finished.unsubscribe();
  }

  /** A request to `model` began; the returned function ends it with its HTTP status. */
  begin(model: string): (status: number) => void {
    const started = performance.now();
    this.pending.inc({ model });
    return (status) => {
      this.pending.dec({ model });
      this.duration.inc({ model }, Math.round((performance.now() - started) * 1000));
      if (status < 400) {
        this.success.inc({ model });
        this.count.inc({ model });
      } else this.failure.inc({ model, reason: status < 500 ? 'REJECTED' : 'BACKEND' });
    };
  }

  /** An engine request ended. */
  generation(model: string, metrics: RequestMetrics): void {
    this.queue.inc({ model }, Math.round(metrics.queueMs * 1000));
    if (Number.isFinite(metrics.timeToFirstTokenMs)) this.ttft.observe({ model }, metrics.timeToFirstTokenMs / 1000);
    this.itl.observeAll(model, metrics.interTokenMs.map((gap) => gap / 1000));
    this.tokens.observe({ model }, metrics.tokens);
  }

  async text(): Promise<string> {
    if (this.source !== undefined) return this.source();
    return this.registry.metrics();
  }
}
