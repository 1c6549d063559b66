/**
 * A built model directory for a model source: the source itself when it is built (onnx/ inside), else
 * a build of it (a checkpoint directory or a llama2.c .bin) cached under `$CHORUS_CACHE/builds/`, keyed
 * by a hash of the source's content and the build options. Hashing whole multi-gigabyte checkpoints
 * would take longer than building them, so each file contributes its name, its size and the SHA-256 of
 * its first and last 4 MiB: a copy of a checkpoint finds its build; a changed one does not.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { ChorusError } from '../errors.ts';
import { architectureFor, buildModel, bytesText, percentSteps, type BuildOptions, type ModelConfig } from '../modelbuild/index.ts';
import { cacheDir } from './source.ts';

/** True when `dir` holds a built model (a merged decoder or an encoder). */
export function isBuiltModel(dir: string): boolean {
  return existsSync(join(dir, 'onnx', 'decoder_model_merged.onnx')) || existsSync(join(dir, 'onnx', 'encoder_model.onnx'));
}

/** True when `path` is a checkpoint of a decoder-only model (a llama2.c .bin, or a config.json of one). */
export function isDecoderOnlySource(path: string): boolean {
  if (!existsSync(path)) return false;
  if (!statSync(path).isDirectory()) return true;
  try {
    return architectureFor(JSON.parse(readFileSync(join(path, 'config.json'), 'utf8')) as ModelConfig).kind === 'decoder';
  } catch {
    return false;
  }
}

/** `path` when built, else its cached build (made now, with `log` told, when missing). */
export function builtModelDirectory(path: string, options: Omit<BuildOptions, 'source' | 'out'> = {}, log: (line: string) => void = () => {}, param = 'source'): string {
  if (!existsSync(path)) throw new ChorusError('CHORUS_FILE_MISSING', `${param} ${path} does not exist`, { param, value: path });
  if (isBuiltModel(path)) return path;
  const hash = createHash('sha256');
  hash.update(JSON.stringify([options.dtype ?? 'fp32', options.flavor ?? 'portable', options.task ?? 'generate', options.outputAttentions ?? false, ...(options.greedySearch ? ['greedy'] : []), ...(options.slotDecoder ? ['slots'] : [])]));
  const files = statSync(path).isDirectory() ? listFiles(path) : [path];
  if (options.tokenizer !== undefined) files.push(options.tokenizer);
  for (const file of files) {
    hash.update(`\0${statSync(path).isDirectory() && file.startsWith(path) ? relative(path, file) : ''}\0${statSync(file).size}\0`);
    hash.update(sampleDigest(file));
  }
  const out = join(cacheDir(), 'builds', hash.digest('hex').slice(0, 16));
  if (!isBuiltModel(out)) {
    log(`building ${path} into ${out}`);
    const { stats } = buildModel({ ...options, source: path, out, onWeights: percentSteps((percent, done, total) => log(`building: ${percent}% of the weights written (${bytesText(done)} of ${bytesText(total)})`)) });
    log(`built in ${stats.seconds} s, peak RSS ${bytesText(stats.peakRssBytes)}`);
  }
  return out;
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
