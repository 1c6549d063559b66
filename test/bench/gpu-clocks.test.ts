/**
 * The GPU speed runs' clocks, slowdowns and identity (bench/gpu/gpu-clocks.ts), read from a stand-in
 * nvidia-smi on PATH that answers as the H100 host's does (its `-q` text as the driver prints it).
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { identityOf, slowdownCounters, withGpuClocks } from '../../bench/gpu/gpu-clocks.ts';

const PERFORMANCE = (capped: number): string => `
==============NVSMI LOG==============

Timestamp                                              : Fri Nov 27 15:40:12 2026
Driver Version                                         : 580.159.04
CUDA Version                                           : 13.0

Attached GPUs                                          : 1
GPU 00000000:19:00.0
    Performance State                                  : P0
    Clocks Event Reasons
        Idle                                           : Not Active
        SW Power Cap                                   : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                               : ${capped} us
        Sync Boost                                     : 0 us
        SW Thermal Slowdown                            : 0 us
        HW Thermal Slowdown                            : 0 us
        HW Power Braking                               : 0 us
    Sparse Operation Mode                              : Disabled
`;

const FULL = `
Driver Version                                         : 580.159.04
Attached GPUs                                          : 1
GPU 00000000:19:00.0
    Product Name                                       : NVIDIA H100 80GB HBM3
    GPU Part Number                                    : 2330-885-A1
    Inforom Version
        Image Version                                  : G520.0200.00.05
        OEM Object                                     : 2.1
    VBIOS Version                                      : 96.00.99.00.01
`;

let dir = '';
let path = '';

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'chorus-smi-'));
  writeFileSync(join(dir, 'performance-1.txt'), PERFORMANCE(1200));
  writeFileSync(join(dir, 'performance-2.txt'), PERFORMANCE(1450));
  writeFileSync(join(dir, 'full.txt'), FULL);
  // The stand-in: a sample line every 20 ms for -lms, the limits' line, and the -q texts, the
  // performance counters' second reading 250 us past the first.
  writeFileSync(
    join(dir, 'nvidia-smi'),
    `#!/usr/bin/env bash
here=$(dirname "$0")
case "$*" in
  *-lms*) while true; do echo "1980, 2619, 520.5"; sleep 0.02; done ;;
  *--query-gpu=name*) echo "NVIDIA H100 80GB HBM3, 1980, 700.00" ;;
  *PERFORMANCE*) n=$(cat "$here/reads" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$here/reads"; cat "$here/performance-$n.txt" ;;
  "-q -i 0") cat "$here/full.txt" ;;
  *) exit 6 ;;
esac
`,
  );
  chmodSync(join(dir, 'nvidia-smi'), 0o755);
  path = process.env.PATH ?? '';
  process.env.PATH = `${dir}:${path}`;
});

after(() => {
  process.env.PATH = path;
  rmSync(dir, { recursive: true, force: true });
});

test('the slowdown counters and the identity are read from nvidia-smi -q text', () => {
  assert.deepEqual(slowdownCounters(PERFORMANCE(7)), { 'SW Power Capping': 7, 'Sync Boost': 0, 'SW Thermal Slowdown': 0, 'HW Thermal Slowdown': 0, 'HW Power Braking': 0 });
  assert.equal(slowdownCounters(FULL), undefined);
  assert.deepEqual(identityOf(FULL), { driver: '580.159.04', vbios: '96.00.99.00.01', inforom: 'G520.0200.00.05', part_number: '2330-885-A1' });
  assert.deepEqual(identityOf('nothing here'), {});
});

test('a run carries its clocks, the slowdowns while it ran, and the GPU it ran on', async () => {
  const { result, clocks } = await withGpuClocks(async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return 'done';
  });
  assert.equal(result, 'done');
  assert.ok(clocks.samples >= 2, `samples: ${clocks.samples}`);
  assert.equal(clocks.sm_mhz_median, 1980);
  assert.equal(clocks.sm_mhz_min, 1980);
  assert.equal(clocks.mem_mhz_median, 2619);
  assert.equal(clocks.power_w_median, 520.5);
  assert.equal(clocks.name, 'NVIDIA H100 80GB HBM3');
  assert.equal(clocks.power_limit_w, 700);
  assert.deepEqual(clocks.slowdown_us, { 'SW Power Capping': 250, 'Sync Boost': 0, 'SW Thermal Slowdown': 0, 'HW Thermal Slowdown': 0, 'HW Power Braking': 0 });
  assert.equal(clocks.vbios, '96.00.99.00.01');
  assert.equal(clocks.part_number, '2330-885-A1');
});
