import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';

// Each case in a fresh process: the rule reads and sets the process's environment.
function run(env: Record<string, string>, cudaOptions: string): { options: unknown; override: string | null } {
  const script = `import { exactFp32CudaOptions } from './src/runtime/index.ts';
const options = exactFp32CudaOptions(${cudaOptions});
console.log(JSON.stringify({ options: options ?? null, override: process.env.NVIDIA_TF32_OVERRIDE ?? null }));`;
  const clean = { ...process.env };
  delete clean.NVIDIA_TF32_OVERRIDE;
  delete clean.CHORUS_ALLOW_TF32;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { env: { ...clean, ...env }, encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!);
}

test('the native engine\'s CUDA sessions keep fp32 exact unless TF32 is asked for', () => {
  assert.deepEqual(run({}, 'undefined'), { options: { use_tf32: 0 }, override: '0' });
  // A model's own use_tf32 wins (the process is left as it is), and other options pass through.
  assert.deepEqual(run({}, "{ use_tf32: 1, arena_extend_strategy: 'kSameAsRequested' }"), {
    options: { use_tf32: 1, arena_extend_strategy: 'kSameAsRequested' },
    override: null,
  });
  assert.deepEqual(run({}, "{ arena_extend_strategy: 'kSameAsRequested' }"), { options: { use_tf32: 0, arena_extend_strategy: 'kSameAsRequested' }, override: '0' });
  assert.deepEqual(run({ CHORUS_ALLOW_TF32: '1' }, "{ device_id: '0' }"), { options: { device_id: '0' }, override: null });
  assert.deepEqual(run({ NVIDIA_TF32_OVERRIDE: '1' }, 'undefined'), { options: null, override: '1' });
  assert.deepEqual(run({ NVIDIA_TF32_OVERRIDE: '0' }, 'undefined'), { options: { use_tf32: 0 }, override: '0' });
});
