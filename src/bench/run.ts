/**
 * The load generator of `chorus bench`: for each setting of a sweep, either a fixed number of clients
 * each sending its next request when the last is answered (`concurrency`), or requests sent at a rate
 * with exponential gaps (a Poisson process, seeded; `inf` sends them all at once), whatever the answers.
 * A setting ends after `requests` requests or, with `durationS`, when no new request may start; requests
 * already sent are always waited for. Results keep every request's timings beside the summaries.
 */
import { invalidArgument } from '../errors.ts';
import { timedRequest, type RequestRecord, type Sampling, type Target } from './protocols.ts';
import { summarize, type SettingSummary } from './stats.ts';

export interface Setting {
  concurrency?: number;
  /** Requests per second; Infinity sends a setting's requests all at once. */
  requestRate?: number;
}

export interface BenchOptions {
  target: Target;
  sampling: Sampling;
  prompts: string[];
  settings: Setting[];
  /** Requests per setting (default 32 unless `durationS` is given). */
  requests?: number;
  /** Seconds per setting during which new requests start. */
  durationS?: number;
  /**
   * Requests sent before the sweep, not counted: as many at once as the sweep's highest concurrency
   * (one at a time for request rates), so that the server has met the batch sizes it is measured at.
   */
  warmup?: number;
  /** Seed of the request-rate arrival times. */
  seed?: number;
  /** Each measured request samples with seed requestSeed + its number in the run (0, 1, ...). */
  requestSeed?: number;
  /** Called as each request is answered. */
  onRecord?: (setting: Setting, record: RequestRecord) => void;
  /** Called when a setting starts, with its number of requests when known. */
  onSetting?: (setting: Setting, requests: number | undefined) => void;
}

export interface BenchSettingResult {
  summary: SettingSummary;
  requests: RequestRecord[];
}

export interface BenchResult {
  tool: 'chorus bench';
  createdAt: string;
  target: Omit<Target, 'apiKey'>;
  sampling: Sampling;
  /** Seed of the first measured request; each next one adds 1. */
  requestSeed?: number;
  prompts: { count: number; source: string; targetTokens?: number; measuredTokens?: number };
  requestsPerSetting?: number;
  durationS?: number;
  warmup: number;
  settings: BenchSettingResult[];
}

export function settingLabel(setting: Setting): string {
  if (setting.concurrency !== undefined) return `concurrency ${setting.concurrency}`;
  return `rate ${setting.requestRate === Infinity ? 'inf' : `${setting.requestRate}/s`}`;
}

/** A seeded uniform generator in (0, 1). */
function uniform(seed: number): () => number {
  let state = (seed >>> 0) || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return ((state >>> 0) + 0.5) / 4294967296;
  };
}

/** Requests per setting: the count asked for, else 32 unless a duration bounds the setting instead. */
export function requestsPerSetting(requests: number | undefined, durationS: number | undefined): number | undefined {
  return requests ?? (durationS === undefined ? 32 : undefined);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

export async function runBench(options: BenchOptions): Promise<BenchSettingResult[]> {
  const { target, sampling, prompts } = options;
  if (prompts.length === 0) throw invalidArgument('prompts', 'at least one prompt', prompts);
  const requests = requestsPerSetting(options.requests, options.durationS);
  if (requests === undefined && options.settings.some((s) => s.requestRate === Infinity)) throw invalidArgument('--requests', 'a count when --request-rate has inf (all at once needs a number of requests)', undefined);
  const warmup = options.warmup ?? 0;
  let warmed = 0;
  const warmer = async (): Promise<void> => {
    for (let i = warmed++; i < warmup; i = warmed++) await timedRequest(target, prompts[i % prompts.length]!, sampling, -1, i % prompts.length, performance.now());
  };
  const warmers = Math.min(warmup, Math.max(1, ...options.settings.map((s) => s.concurrency ?? 1)));
  await Promise.all(Array.from({ length: warmers }, warmer));
  const results: BenchSettingResult[] = [];
  let sent = 0;
  for (const setting of options.settings) {
    options.onSetting?.(setting, requests);
    const records: RequestRecord[] = [];
    const origin = performance.now();
    const deadline = options.durationS === undefined ? Infinity : origin + options.durationS * 1000;
    const more = (issued: number): boolean => (requests === undefined || issued < requests) && performance.now() < deadline;
    let issued = 0;
    const send = async (): Promise<void> => {
      const index = issued++;
      const number = sent++;
      const promptIndex = number % prompts.length;
      const seeded = options.requestSeed === undefined ? sampling : { ...sampling, seed: options.requestSeed + number };
      const record = await timedRequest(target, prompts[promptIndex]!, seeded, index, promptIndex, origin);
      records.push(record);
      options.onRecord?.(setting, record);
    };
    if (setting.concurrency !== undefined) {
      const client = async (): Promise<void> => {
        while (more(issued)) await send();
      };
      await Promise.all(Array.from({ length: setting.concurrency }, client));
    } else {
      const rate = setting.requestRate!;
      const next = uniform((options.seed ?? 0) + results.length + 1);
      const inFlight: Array<Promise<void>> = [];
      let at = origin;
      while (more(issued)) {
        if (rate !== Infinity) {
          at += (-Math.log(next()) / rate) * 1000;
          await sleep(at - performance.now());
          if (!more(issued)) break;
        }
        inFlight.push(send());
      }
      await Promise.all(inFlight);
    }
    records.sort((a, b) => a.index - b.index);
    results.push({ summary: summarize(settingLabel(setting), setting, records, target.stream), requests: records });
  }
  return results;
}

/** Parses `--concurrency 1,8,32` or `--request-rate 5,10,inf` into settings. */
export function parseSettings(concurrency: string | undefined, requestRate: string | undefined): Setting[] {
  if (concurrency !== undefined && requestRate !== undefined) throw invalidArgument('--request-rate', 'used without --concurrency (one load mode per run)', requestRate);
  if (requestRate !== undefined) {
    return requestRate.split(',').map((part) => {
      const value = part.trim() === 'inf' ? Infinity : Number(part);
      if (!(value > 0)) throw invalidArgument('--request-rate', 'comma-separated positive numbers of requests per second, or inf', requestRate);
      return { requestRate: value };
    });
  }
  return (concurrency ?? '1').split(',').map((part) => {
    const value = Number(part);
    if (!Number.isInteger(value) || value < 1) throw invalidArgument('--concurrency', 'comma-separated positive integers', concurrency);
    return { concurrency: value };
  });
}
