/**
 * A built model directory for a model source: the source itself when it is built (onnx/ inside), else
 * a build of it (a checkpoint directory or a llama2.c .bin) cached under `$CHORUS_CACHE/builds/`, keyed
 * by a hash of the source's content and the build options. Hashing whole multi-gigabyte checkpoints
 * would take longer than building them, so each file contributes its name, its size and the SHA-256 of
 * its first and last 4 MiB: a copy of a checkpoint finds its build; a changed one does not. Builds
 * and fallback checkpoints are cache entries (cache-entry.ts: written whole, one process at a time),
 * made in a child process (build-process.ts).
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { ChorusError } from '../errors.ts';
import { architectureFor, checkpointKind, isNemoT5, type BuildOptions, type CheckpointArch, type CheckpointSize, type ModelConfig } from '../modelbuild/index.ts';
import { runBuildJob } from './build-process.ts';
import { writeEntry } from './cache-entry.ts';
import { cacheDir } from './source.ts';

/** True when `dir` holds a built model (a merged decoder or an encoder). */
export function isBuiltModel(dir: string): boolean {
  return existsSync(join(dir, 'onnx', 'decoder_model_merged.onnx')) || existsSync(join(dir, 'onnx', 'encoder_model.onnx')) || tensorParallelBuild(dir) !== undefined;
}

/** N of a build split over N ranks (its onnx/tp{N}/rank0/ decoder), else undefined. */
export function tensorParallelBuild(dir: string): number | undefined {
  const onnx = join(dir, 'onnx');
  if (!existsSync(onnx)) return undefined;
  const split = readdirSync(onnx).find((name) => /^tp[1-9]\d*$/.test(name) && existsSync(join(onnx, name, 'rank0', 'decoder_model_slots.onnx')));
  return split === undefined ? undefined : Number(split.slice(2));
}

/**
 * True when `path` is a checkpoint of a decoder-only model: a llama2.c .bin, a Megatron-LM or NeMo GPT
 * (built as GPT-2; not a NeMo T5), or a checkpoint whose config.json is of one (beside a .pt state dict).
 */
export function isDecoderOnlySource(path: string): boolean {
  if (!existsSync(path)) return false;
  const kind = checkpointKind(path);
  if (kind === 'nemo') {
    try {
      return !isNemoT5(path);
    } catch {
      return false;
    }
  }
  if (kind !== 'hf' && kind !== 'torch-file') return true;
  try {
    return architectureFor(JSON.parse(readFileSync(join(kind === 'hf' ? path : dirname(path), 'config.json'), 'utf8')) as ModelConfig).kind === 'decoder';
  } catch {
    return false;
  }
}

/** `path` when built, else its cached build (made now, with `log` told, when missing). */
export async function builtModelDirectory(path: string, options: Omit<BuildOptions, 'source' | 'out' | 'onProgress'> = {}, log: (line: string) => void = () => {}, param = 'source'): Promise<string> {
  if (!existsSync(path)) throw new ChorusError('CHORUS_FILE_MISSING', `${param} ${path} does not exist`, { param, value: path });
  if (isBuiltModel(path)) return path;
  const hash = createHash('sha256');
  hash.update(JSON.stringify([options.dtype ?? 'fp32', options.flavor ?? 'portable', options.task ?? 'generate', options.outputAttentions ?? false, ...(options.greedySearch ? ['greedy'] : []), ...(options.slotDecoder ? ['slots'] : []), ...((options.tensorParallel ?? 1) > 1 ? ['tp', options.tensorParallel] : []), ...(options.weights === undefined || options.weights === 'checkpoint' ? [] : [options.weights, options.groupSize ?? 0, options.quantizeHead ?? 'default'])]));
  const files = statSync(path).isDirectory() ? listFiles(path) : [path];
  if (options.tokenizer !== undefined) files.push(options.tokenizer);
  for (const file of files) {
    hash.update(`\0${statSync(path).isDirectory() && file.startsWith(path) ? relative(path, file) : ''}\0${statSync(file).size}\0`);
    hash.update(sampleDigest(file));
  }
  const out = join(cacheDir(), 'builds', hash.digest('hex').slice(0, 16));
  const build = async (tmp: string): Promise<void> => {
    log(`building ${path} into ${out}`);
    await runBuildJob({ kind: 'build', options: { ...options, source: path, out: tmp } }, log);
  };
  await writeEntry(out, build, { complete: isBuiltModel, log });
  return out;
}

/** A random-weight checkpoint (a model definition's `fallback`), made once into the cache. */
export async function fallbackCheckpoint(fallback: { arch: CheckpointArch; size: CheckpointSize; seed: number }, log: (line: string) => void = () => {}): Promise<string> {
  const dir = join(cacheDir(), 'fallback', `${fallback.arch}-${fallback.size}-${fallback.seed}`);
  const make = (tmp: string): Promise<void> => {
    log(`making a random ${fallback.arch} ${fallback.size} checkpoint (seed ${fallback.seed}) into ${dir}`);
    return runBuildJob({ kind: 'checkpoint', options: { ...fallback, out: tmp } });
  };
  await writeEntry(dir, make, { complete: (d) => existsSync(join(d, 'config.json')) && existsSync(join(d, 'model.safetensors')), log });
  return dir;
}

/** Every file under `dir`, sorted. */
function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? listFiles(join(dir, entry.name)) : entry.isFile() ? [join(dir, entry.name)] : []))
    .sort();
}

const SAMPLE = 4 * 1024 * 1024;

/** SHA-256 of a file's first and last 4 MiB (all of it when smaller). */
function sampleDigest(file: string): string {
  const size = statSync(file).size;
  const hash = createHash('sha256');
  const fd = openSync(file, 'r');
  try {
    const read = (position: number, length: number): void => {
      const buffer = Buffer.alloc(length);
      readSync(fd, buffer, 0, length, position);
      hash.update(buffer);
    };
    if (size <= 2 * SAMPLE) read(0, size);
    else {
      read(0, SAMPLE);
      read(size - SAMPLE, SAMPLE);
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}
