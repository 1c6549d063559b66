/** Summaries of a setting's request records: rates, token throughput, latency percentiles, errors. */
import type { RequestRecord } from './protocols.ts';

export interface Percentiles {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
}

export interface SettingSummary {
  /** `concurrency 8` or `rate 5/s` (`rate inf`). */
  label: string;
  concurrency?: number;
  requestRate?: number;
  requests: number;
  ok: number;
  /** Failed requests by HTTP status ("0" for no response, "stream" for an error inside a 200 stream). */
  errors: Record<string, number>;
  durationS: number;
  requestsPerS: number;
  promptTokens: number;
  outputTokens: number;
  outputTokensPerS: number;
  /** Streamed runs only. */
  ttftMs?: Percentiles;
  itlMs?: Percentiles;
  /** Time per output token after the first: (latency - TTFT) / (tokens - 1), per request. */
  tpotMs?: Percentiles;
  latencyMs: Percentiles;
}

/** The q-th percentile (0..100) with linear interpolation between ranks (numpy's default). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = ((sorted.length - 1) * q) / 100;
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  return sorted[low]! + (sorted[high]! - sorted[low]!) * (rank - low);
}

export function percentiles(values: readonly number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.length === 0 ? Number.NaN : sorted.reduce((s, v) => s + v, 0) / sorted.length;
  return { mean, p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99) };
}

/** The summary of one setting's records; `durationS` is from its first request sent to its last answer. */
export function summarize(label: string, setting: { concurrency?: number; requestRate?: number }, records: readonly RequestRecord[], stream: boolean): SettingSummary {
  const ok = records.filter((r) => r.ok);
  const errors: Record<string, number> = {};
  for (const r of records) {
    if (r.ok) continue;
    const key = r.status === 200 ? 'stream' : String(r.status);
    errors[key] = (errors[key] ?? 0) + 1;
  }
  const start = records.reduce((m, r) => Math.min(m, r.sentAt), Infinity);
  const end = records.reduce((m, r) => Math.max(m, r.sentAt + r.latencyMs), -Infinity);
  const durationS = records.length === 0 ? 0 : (end - start) / 1000;
  const outputTokens = ok.reduce((s, r) => s + (r.outputTokens ?? 0), 0);
  const promptTokens = ok.reduce((s, r) => s + (r.promptTokens ?? 0), 0);
  const summary: SettingSummary = {
    label,
    ...setting,
    requests: records.length,
    ok: ok.length,
    errors,
    durationS,
    requestsPerS: durationS > 0 ? ok.length / durationS : 0,
    promptTokens,
    outputTokens,
    outputTokensPerS: durationS > 0 ? outputTokens / durationS : 0,
    latencyMs: percentiles(ok.map((r) => r.latencyMs)),
  };
  if (stream) {
    const timed = ok.filter((r) => r.ttftMs !== undefined);
    summary.ttftMs = percentiles(timed.map((r) => r.ttftMs!));
    summary.itlMs = percentiles(timed.flatMap((r) => r.itlMs));
    summary.tpotMs = percentiles(timed.filter((r) => (r.outputTokens ?? 0) > 1).map((r) => (r.latencyMs - r.ttftMs!) / (r.outputTokens! - 1)));
  }
  return summary;
}

const ms = (p: Percentiles | undefined): string => (p === undefined || Number.isNaN(p.p50) ? '-' : `${p.p50.toFixed(1)} / ${p.p90.toFixed(1)} / ${p.p99.toFixed(1)}`);

/** The summaries as an aligned text table (percentiles as p50 / p90 / p99, milliseconds). */
export function formatTable(summaries: readonly SettingSummary[]): string {
  const header = ['setting', 'requests', 'ok', 'errors', 'req/s', 'out tok/s', 'TTFT ms p50/p90/p99', 'ITL ms p50/p90/p99', 'TPOT ms p50/p90/p99', 'latency ms p50/p90/p99'];
  const rows = summaries.map((s) => [
    s.label,
    String(s.requests),
    String(s.ok),
    Object.keys(s.errors).length === 0 ? '-' : Object.entries(s.errors).map(([k, v]) => `${k}: ${v}`).join(', '),
    s.requestsPerS.toFixed(2),
    s.outputTokensPerS.toFixed(1),
    ms(s.ttftMs),
    ms(s.itlMs),
    ms(s.tpotMs),
    ms(s.latencyMs),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
