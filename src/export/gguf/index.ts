/**
 * `chorus export gguf`: a checkpoint (Hugging Face directory or llama2.c `.bin`) written as one GGUF
 * file that llama.cpp and the programs built on it load: metadata, the tokenizer, and every weight in
 * F32, F16 or Q8_0.
 */
import { existsSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { ChorusError, invalidArgument } from '../../errors.ts';
import { architectureFor, readHfCheckpoint, readLlama2cCheckpoint, type Checkpoint } from '../../modelbuild/index.ts';
import { writeGguf, type GgufValue } from './container.ts';
import { FILE_TYPE_CODE, gpt2, llamaFamily, type GgufFileType, type GgufModel } from './models.ts';
import { findTokenizer, padVocab, readVocab, vocabMetadata } from './vocab.ts';

export { readGgufHeader, type GgufHeader, type GgufTensorInfo } from './container.ts';
export type { GgufFileType } from './models.ts';
export const GGUF_FILE_TYPES: readonly GgufFileType[] = ['f32', 'f16', 'q8_0'];

/** Options of `exportGguf`. */
export interface ExportGgufOptions {
  /** A Hugging Face checkpoint directory, or a llama2.c `.bin`. */
  source: string;
  /** The `.gguf` file to write. */
  out: string;
  /** The weights' type. Default: f16. */
  type?: GgufFileType;
  /** The tokenizer file; default: the one beside or in the checkpoint. */
  tokenizer?: string;
  /** `general.name`; default: the checkpoint's file or directory name. */
  name?: string;
}

/** What was written. */
export interface ExportGgufResult {
  out: string;
  /** llama.cpp's architecture name. */
  arch: string;
  tensors: number;
  bytes: number;
  vocabSize: number;
  tokenizer: string;
}

/** Writes `options.source` as a GGUF file. */
export function exportGguf(options: ExportGgufOptions): ExportGgufResult {
  const fileType = options.type ?? 'f16';
  if (!GGUF_FILE_TYPES.includes(fileType)) throw invalidArgument('type', GGUF_FILE_TYPES.join(', '), fileType);
  if (!existsSync(options.source)) throw new ChorusError('CHORUS_FILE_MISSING', `export source ${options.source} does not exist`, { param: 'source' });
  checkOut(options);
  const checkpoint: Checkpoint = statSync(options.source).isFile() ? readLlama2cCheckpoint(options.source) : readHfCheckpoint(options.source);
  const architecture = architectureFor(checkpoint.config);
  if (architecture.kind !== 'decoder') {
    throw new ChorusError('CHORUS_UNSUPPORTED', `GGUF export covers decoder-only models (llama, qwen2, gpt2); ${String(checkpoint.config.model_type)} is an encoder-decoder`, { param: 'model_type' });
  }
  const spec = architecture.spec(checkpoint.config);
  if (checkpoint.config.model_type === 'gemma2') throw new ChorusError('CHORUS_UNSUPPORTED', 'GGUF export does not cover gemma2 yet; it covers the Llama family (llama, qwen2) and gpt2', { param: 'model_type' });
  const model: GgufModel = checkpoint.config.model_type === 'gpt2' ? gpt2(checkpoint, spec, fileType) : llamaFamily(checkpoint, spec, fileType);

  const tokenizer = options.tokenizer ?? findTokenizer(options.source);
  const ids = (key: string): number | undefined => (typeof checkpoint.config[key] === 'number' ? (checkpoint.config[key] as number) : undefined);
  const vocab = padVocab(readVocab(tokenizer, { bos: ids('bos_token_id'), eos: ids('eos_token_id') }), spec.vocabSize);

  const metadata = new Map<string, GgufValue>([
    ['general.architecture', { type: 'string', value: model.arch }],
    ['general.name', { type: 'string', value: options.name ?? basename(options.source).replace(/\.bin$/, '') }],
    ['general.file_type', { type: 'u32', value: FILE_TYPE_CODE[fileType] }],
    ...model.metadata,
    ...vocabMetadata(vocab, model.bpePre, model.addBos),
  ]);
  // Written beside the output and renamed when whole: no half-written or unfaithful file is left
  // behind, and a file of that name is replaced only by a finished one.
  const partial = join(dirname(resolve(options.out)), `.${basename(options.out)}.partial-${process.pid}`);
  let bytes: number;
  try {
    bytes = writeGguf(partial, metadata, model.tensors);
    checkpoint.finish();
    renameSync(partial, options.out);
  } catch (error) {
    rmSync(partial, { force: true });
    throw error;
  }
  return { out: options.out, arch: model.arch, tensors: model.tensors.length, bytes, vocabSize: vocab.tokens.length, tokenizer };
}

/**
 * The output may not be a file the export reads (the source, its tokenizer, or a file of a source
 * directory): replacing it would destroy the checkpoint. A directory is not a file to write.
 */
function checkOut(options: ExportGgufOptions): void {
  const out = resolve(options.out);
  if (options.out === '' || (existsSync(out) && statSync(out).isDirectory())) throw invalidArgument('out', 'the path of the .gguf file to write, not a directory', options.out);
  const source = resolve(options.source);
  const inside = statSync(source).isDirectory() && !relative(source, out).startsWith('..') && existsSync(out);
  if (out === source || inside || (options.tokenizer !== undefined && out === resolve(options.tokenizer))) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `out ${options.out} is a file the export reads: write the .gguf elsewhere`, { param: 'out' });
  }
}
