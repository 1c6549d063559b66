/**
 * Fetching a Hugging Face model id into the cache (`$CHORUS_CACHE/hf/<org>--<name>/<revision>/`) with
 * `@huggingface/hub`: the files a definition needs (a named `file`, else the model's config, weights and
 * tokenizer files), written as one cache entry (cache-entry.ts: into a temporary directory renamed into
 * place when every file is there, one process at a time), with a progress bar on a terminal. `HF_TOKEN` authenticates, `HF_ENDPOINT` points at another hub (a mirror, or a test
 * server), `HF_HUB_OFFLINE=1` forbids the network.
 */
import { createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { downloadFile, listFiles } from '@huggingface/hub';
import cliProgress from 'cli-progress';
import { ChorusError } from '../errors.ts';
import { writeEntry } from './cache-entry.ts';

/** The files a model or tokenizer directory needs, when no single file is named. */
const WANTED = [
  /^config\.json$/,
  /^generation_config\.json$/,
  /\.safetensors$/,
  /^model\.safetensors\.index\.json$/,
  /^tokenizer(_config)?\.json$/,
  /^special_tokens_map\.json$/,
  /\.model$/,
  /^tokenizer\.bin$/,
  /^vocab\.json$/,
  /^merges\.txt$/,
  /\.tiktoken$/,
];

/** PyTorch weights: fetched only from repositories without safetensors (older hub models ship only these). */
const PYTORCH_WEIGHTS = [/^pytorch_model(-\d{5}-of-\d{5})?\.bin$/, /^pytorch_model\.bin\.index\.json$/];

export function hubUrl(): string {
  return (process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/+$/, '');
}

export function hubOffline(): boolean {
  return ['1', 'true', 'yes'].includes((process.env.HF_HUB_OFFLINE ?? '').toLowerCase());
}

/** A fetch that gives up when no response headers came within `ms` (an unreachable host), not during a body. */
function patientFetch(ms: number): typeof fetch {
  return async (input, init) => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`no answer within ${ms / 1000} s`)), ms);
    try {
      return await fetch(input, { ...init, signal: controller.signal });
    } finally {
      clearTimeout(timer);
    }
  };
}

export interface HubFetch {
  id: string;
  revision: string;
  /** The cache directory the files go to. */
  path: string;
  /** Only this file (a path inside the repository). Default: the config, weight and tokenizer files. */
  file?: string;
  log?: (line: string) => void;
}

/** Downloads what `target` needs into its cache directory; throws naming the URL or the file when it cannot. */
export async function fetchFromHub(target: HubFetch): Promise<void> {
  const base = hubUrl();
  const where = `${base}/${target.id} (revision ${target.revision})`;
  if (hubOffline()) throw new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `${target.id} is not in the cache (${target.path}) and HF_HUB_OFFLINE is set`, { value: target.id });
  const common = { repo: { type: 'model' as const, name: target.id }, revision: target.revision, hubUrl: base, accessToken: process.env.HF_TOKEN, fetch: patientFetch(15_000) };
  let files: Array<{ path: string; size: number }>;
  try {
    files = [];
    for await (const entry of listFiles({ ...common, recursive: true })) if (entry.type === 'file') files.push({ path: entry.path, size: entry.size });
  } catch (error) {
    throw unreachable(where, error);
  }
  const pytorchOnly = !files.some((f) => f.path.endsWith('.safetensors'));
  const needed = (name: string): boolean => WANTED.some((pattern) => pattern.test(name)) || (pytorchOnly && PYTORCH_WEIGHTS.some((pattern) => pattern.test(name)));
  const wanted = target.file !== undefined ? files.filter((f) => f.path === target.file) : files.filter((f) => needed(f.path.split('/').at(-1)!));
  if (target.file !== undefined && wanted.length === 0) {
    throw new ChorusError('CHORUS_FILE_MISSING', `${target.file} is not in ${where}: ${base}/${target.id}/resolve/${target.revision}/${target.file} does not exist`, { param: 'file', value: target.file });
  }
  if (wanted.length === 0) throw new ChorusError('CHORUS_FILE_MISSING', `${where} holds none of the files a model or tokenizer needs (config.json, *.safetensors or pytorch_model.bin, tokenizer files)`);
  const total = wanted.reduce((sum, f) => sum + f.size, 0);
  const download = async (dir: string): Promise<void> => {
    const bar = process.stderr.isTTY ? new cliProgress.SingleBar({ format: `${target.id} {bar} {percentage}% {value}/{total} bytes`, stream: process.stderr }, cliProgress.Presets.shades_classic) : undefined;
    bar?.start(total, 0);
    let done = 0;
    try {
      for (const file of wanted) {
        const out = join(dir, file.path);
        if (existsSync(out)) {
          done += file.size;
          continue;
        }
        const url = `${base}/${target.id}/resolve/${target.revision}/${file.path}`;
        if (bar === undefined) target.log?.(`downloading ${url} (${file.size} bytes)`);
        let blob: Blob | null;
        try {
          blob = await downloadFile({ ...common, path: file.path, xet: false });
        } catch (error) {
          throw unreachable(url, error);
        }
        if (blob === null) throw new ChorusError('CHORUS_FILE_MISSING', `${url} does not exist`, { value: file.path });
        mkdirSync(dirname(out), { recursive: true });
        const body = Readable.fromWeb(blob.stream() as WebReadableStream<Uint8Array>);
        body.on('data', (chunk: Buffer) => bar?.update((done += chunk.length)));
        try {
          await pipeline(body, createWriteStream(out));
        } catch (error) {
          // A failed open or write of the file (a full disk) is the cache's; anything else, the network's.
          const { syscall } = error as { syscall?: unknown };
          if (syscall === 'open' || syscall === 'write') throw error;
          throw unreachable(url, error);
        }
      }
    } finally {
      bar?.stop();
    }
  };
  await writeEntry(target.path, download, { keepFiles: true, complete: (dir) => wanted.every((f) => existsSync(join(dir, f.path))), log: target.log });
}

function unreachable(url: string, error: unknown): ChorusError {
  const message = error instanceof Error ? (error.cause instanceof Error ? `${error.message} (${error.cause.message})` : error.message) : String(error);
  const status = (error as { statusCode?: number }).statusCode;
  if (status === 401 || status === 403) return new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `${url}: access denied (HTTP ${status}); set HF_TOKEN to a token that may read it`, { cause: error });
  if (status === 404) return new ChorusError('CHORUS_NOT_FOUND', `${url}: not found (HTTP 404)`, { cause: error });
  return new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `cannot fetch ${url}: ${message}`, { cause: error });
}
