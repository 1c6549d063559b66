/** bf16 builds run on the native engine only: onnxruntime-node takes no bfloat16 tensors, and its CPU provider runs no bfloat16 graphs. */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChorusError } from '../errors.ts';

/** Fails, saying where bf16 runs, when chorus_build.json says `dir` was built in bf16. */
export function refuseBf16(dir: string): void {
  const file = join(dir, 'chorus_build.json');
  if (!existsSync(file)) return;
  const { dtype } = JSON.parse(readFileSync(file, 'utf8')) as { dtype?: unknown };
  if (dtype === 'bf16') {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${dir} was built in bf16, which runs on GPUs on the native engine only (npm run build:native); the TypeScript engine and the CPU run fp32 and fp16 builds`, { param: 'dtype', value: dtype });
  }
}
