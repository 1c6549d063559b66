/**
 * A built model directory for a model source: the source itself when it is built (onnx/ inside), else
 * a build of it (a checkpoint directory or a llama2.c .bin) cached under `$CHORUS_CACHE/builds/`, keyed
 * by the source's path, size and modification time and by the build options.
 */
import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ChorusError } from '../errors.ts';
import { buildModel, type BuildOptions } from '../modelbuild/index.ts';
import { cacheDir } from './source.ts';

/** True when `dir` holds a built model (a merged decoder or an encoder). */
export function isBuiltModel(dir: string): boolean {
  return existsSync(join(dir, 'onnx', 'decoder_model_merged.onnx')) || existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
}

/** `path` when built, else its cached build (made now, with `log` told, when missing). */
export function builtModelDirectory(path: string, options: Omit<BuildOptions, 'source' | 'out'> = {}, log: (line: string) => void = () => {}, param = 'source'): string {
  if (!existsSync(path)) throw new ChorusError('CHORUS_FILE_MISSING', `${param} ${path} does not exist`, { param, value: path });
  if (isBuiltModel(path)) return path;
  const stat = statSync(path);
  const identity = JSON.stringify([resolve(path), stat.size, stat.mtimeMs, options.dtype ?? 'fp32', options.flavor ?? 'portable', options.task ?? 'generate', options.outputAttentions ?? false]);
  const out = join(cacheDir(), 'builds', createHash('sha256').update(identity).digest('hex').slice(0, 16));
  if (!isBuiltModel(out)) {
    log(`building ${path} into ${out}`);
    buildModel({ ...options, source: path, out });
  }
  return out;
}
