/**
 * The GPU's clocks and power while a measurement runs: nvidia-smi, in a process of its own, samples
 * device 0 every 100 ms (so the measured process only reads its lines), beside the device's limits. A
 * host whose GPU runs at a lower clock or power limit than another's gives other figures for kernels
 * that are bound by instructions rather than memory; results carry these so runs on different hosts can
 * be told apart. Also the microseconds the GPU spent in each slowdown (power cap, thermal, power brake)
 * during the run, from nvidia-smi's counters read before and after it, and the driver's, VBIOS's and
 * InfoROM's versions and the board's part number. Without nvidia-smi the figures are left out
 * (samples 0).
 */
import { execFileSync, spawn } from 'node:child_process';

export interface GpuClocks {
  samples: number;
  name?: string;
  sm_mhz_median?: number;
  sm_mhz_min?: number;
  sm_mhz_max_allowed?: number;
  mem_mhz_median?: number;
  power_w_median?: number;
  power_limit_w?: number;
  /** Microseconds in each slowdown while the run ran, by nvidia-smi's name ("SW Power Capping", ...). */
  slowdown_us?: Record<string, number>;
  driver?: string;
  vbios?: string;
  inforom?: string;
  part_number?: string;
}

/** nvidia-smi's output for `args`, or undefined where it cannot be run or fails. */
function smi(args: string[]): string | undefined {
  try {
    return execFileSync('nvidia-smi', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return undefined;
  }
}

/** The "Clocks Event Reasons Counters" of `nvidia-smi -q` text: each slowdown's microseconds since boot. */
export function slowdownCounters(text: string): Record<string, number> | undefined {
  const lines = text.split('\n');
  const at = lines.findIndex((l) => /^\s*Clocks (Event|Throttle) Reasons Counters\s*$/.test(l));
  if (at < 0) return undefined;
  const counters: Record<string, number> = {};
  for (const line of lines.slice(at + 1)) {
    const m = /^\s+(\S.*?)\s+:\s+(\d+) us\s*$/.exec(line);
    if (m === null) break;
    counters[m[1]!] = Number(m[2]);
  }
  return counters;
}

/** The driver's, VBIOS's and InfoROM image's versions and the board's part number in `nvidia-smi -q` text. */
export function identityOf(text: string): Pick<GpuClocks, 'driver' | 'vbios' | 'inforom' | 'part_number'> {
  const field = (name: string): string | undefined => new RegExp(`^\\s*${name}\\s+:\\s+(.+?)\\s*$`, 'm').exec(text)?.[1];
  const found = { driver: field('Driver Version'), vbios: field('VBIOS Version'), inforom: field('Image Version'), part_number: field('GPU Part Number') };
  return Object.fromEntries(Object.entries(found).filter(([, v]) => v !== undefined));
}

/** Each slowdown's microseconds between two readings of the counters (both needed). */
function slowdownsBetween(before: Record<string, number> | undefined, after: Record<string, number> | undefined): Record<string, number> | undefined {
  if (before === undefined || after === undefined) return undefined;
  return Object.fromEntries(Object.entries(after).filter(([k]) => k in before).map(([k, v]) => [k, v - before[k]!]));
}

/** Device 0's slowdown counters now. */
const readSlowdowns = (): Record<string, number> | undefined => {
  const text = smi(['-q', '-d', 'PERFORMANCE', '-i', '0']);
  return text === undefined ? undefined : slowdownCounters(text);
};

const median = (values: number[]): number | undefined => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  return sorted.length === 0 ? undefined : sorted[Math.floor(sorted.length / 2)];
};

type DeviceFacts = Pick<GpuClocks, 'name' | 'sm_mhz_max_allowed' | 'power_limit_w' | 'driver' | 'vbios' | 'inforom' | 'part_number'>;
let facts: DeviceFacts | undefined;

/**
 * Device 0's name, highest SM clock and enforced power limit, and its identity (identityOf), asked of
 * nvidia-smi once a process (they do not change between measurements); {} where it cannot say.
 */
function deviceFacts(): DeviceFacts {
  if (facts !== undefined) return facts;
  facts = {};
  const text = smi(['--query-gpu=name,clocks.max.sm,enforced.power.limit', '--format=csv,noheader,nounits', '-i', '0']);
  if (text !== undefined) {
    const [name, sm, power] = text.trim().split('\n')[0]!.split(',').map((s) => s.trim());
    Object.assign(facts, { name, sm_mhz_max_allowed: Number(sm), power_limit_w: Number(power) });
  }
  const full = smi(['-q', '-i', '0']);
  if (full !== undefined) Object.assign(facts, identityOf(full));
  return facts;
}

/** `run`'s result, and device 0's clocks and power sampled while it ran. */
export async function withGpuClocks<T>(run: () => Promise<T>): Promise<{ result: T; clocks: GpuClocks }> {
  const lines: string[] = [];
  const slowdownsBefore = readSlowdowns();
  let sampler: ReturnType<typeof spawn> | undefined;
  try {
    sampler = spawn('nvidia-smi', ['--query-gpu=clocks.sm,clocks.mem,power.draw', '--format=csv,noheader,nounits', '-i', '0', '-lms', '100'], { stdio: ['ignore', 'pipe', 'ignore'] });
    sampler.on('error', () => undefined);
    let partial = '';
    sampler.stdout?.on('data', (chunk: Buffer) => {
      const text = partial + chunk.toString('utf8');
      const parts = text.split('\n');
      partial = parts.pop() ?? '';
      lines.push(...parts.filter((l) => l.trim() !== ''));
    });
  } catch {
    sampler = undefined;
  }
  try {
    const result = await run();
    const rows = lines.map((l) => l.split(',').map((s) => Number(s.trim())));
    const sm = rows.map((r) => r[0]!);
    const clocks: GpuClocks = { samples: rows.length };
    if (rows.length > 0) {
      Object.assign(clocks, deviceFacts(), {
        sm_mhz_median: median(sm),
        sm_mhz_min: sm.some(Number.isFinite) ? Math.min(...sm.filter(Number.isFinite)) : undefined,
        mem_mhz_median: median(rows.map((r) => r[1]!)),
        power_w_median: median(rows.map((r) => r[2]!)),
      });
      const slowdowns = slowdownsBetween(slowdownsBefore, readSlowdowns());
      if (slowdowns !== undefined) clocks.slowdown_us = slowdowns;
    }
    return { result, clocks };
  } finally {
    sampler?.kill();
  }
}
