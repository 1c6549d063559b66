/**
 * A per-model histogram that takes a request's values at once: the inter-token latencies, one per
 * token, counted into their buckets with no per-value label lookups (prom-client's `observe` validates
 * and hashes the labels at every value), and exported as prom-client's own histograms are.
 */
import client from 'prom-client';

interface Series {
  /** Values in each bucket (not cumulative), the last one past every bound. */
  counts: number[];
  sum: number;
  count: number;
}

export class GapHistogram extends client.Histogram<'model'> {
  private readonly series = new Map<string, Series>();

  constructor(
    private readonly options: { name: string; help: string; buckets: number[]; registers: client.Registry[] },
  ) {
    super({ ...options, labelNames: ['model'] });
  }

  /** Counts `values` (seconds) for `model`. */
  observeAll(model: string, values: readonly number[]): void {
    const bounds = this.options.buckets;
    let series = this.series.get(model);
    if (series === undefined) {
      series = { counts: new Array<number>(bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.series.set(model, series);
    }
    for (const value of values) {
      let b = 0;
      while (b < bounds.length && value > bounds[b]!) b++;
      series.counts[b]!++;
      series.sum += value;
    }
    series.count += values.length;
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor resets before this class's fields exist.
    this.series?.clear();
  }

  /** What the registry's text export reads (prom-client's histograms have it apart from `get`). */
  getForPromString(): ReturnType<client.Histogram<'model'>['get']> {
    return this.get();
  }

  override async get(): ReturnType<client.Histogram<'model'>['get']> {
    const { name, help, buckets } = this.options;
    const values: Array<{ metricName: string; labels: Record<string, string | number>; value: number }> = [];
    for (const [model, series] of this.series) {
      let cumulative = 0;
      buckets.forEach((le, b) => {
        cumulative += series.counts[b]!;
        values.push({ metricName: `${name}_bucket`, labels: { le, model }, value: cumulative });
      });
      values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', model }, value: series.count });
      values.push({ metricName: `${name}_sum`, labels: { model }, value: series.sum });
      values.push({ metricName: `${name}_count`, labels: { model }, value: series.count });
    }
    // prom-client's MetricType enum types what its histograms set to the string 'histogram'.
    return { name, help, type: 'histogram', aggregator: 'sum', values } as unknown as Awaited<ReturnType<client.Histogram<'model'>['get']>>;
  }
}
