/**
 * The GPU's clocks and power while a measurement runs: nvidia-smi, in a process of its own, samples
 * device 0 every 100 ms (so the measured process only reads its lines), beside the device's limits. A
 * host whose GPU runs at a lower clock or power limit than another's gives other figures for kernels
 * that are bound by instructions rather than memory; results carry these so runs on different hosts can
 * be told apart. Without nvidia-smi the figures are left out (samples 0).
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
}

const median = (values: number[]): number | undefined => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  return sorted.length === 0 ? undefined : sorted[Math.floor(sorted.length / 2)];
};

/** Device 0's name, highest SM clock and enforced power limit, or {} where nvidia-smi cannot say. */
function limits(): Pick<GpuClocks, 'name' | 'sm_mhz_max_allowed' | 'power_limit_w'> {
  try {
    const line = execFileSync('nvidia-smi', ['--query-gpu=name,clocks.max.sm,enforced.power.limit', '--format=csv,noheader,nounits'], { encoding: 'utf8' }).trim().split('\n')[0]!;
    const [name, sm, power] = line.split(',').map((s) => s.trim());
    return { name, sm_mhz_max_allowed: Number(sm), power_limit_w: Number(power) };
  } catch {
    return {};
  }
}

/** `run`'s result, and device 0's clocks and power sampled while it ran. */
export async function withGpuClocks<T>(run: () => Promise<T>): Promise<{ result: T; clocks: GpuClocks }> {
  const lines: string[] = [];
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
      Object.assign(clocks, limits(), {
        sm_mhz_median: median(sm),
        sm_mhz_min: sm.some(Number.isFinite) ? Math.min(...sm.filter(Number.isFinite)) : undefined,
        mem_mhz_median: median(rows.map((r) => r[1]!)),
        power_w_median: median(rows.map((r) => r[2]!)),
      });
    }
    return { result, clocks };
  } finally {
    sampler?.kill();
  }
}
