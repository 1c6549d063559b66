/**
 * node-llama-cpp, the peer Chorus is measured against, kept out of Chorus's dependencies (with its
 * platform binaries it weighs about 600 MB): installed into bench/peer/node_modules on first use from
 * bench/peer's own package.json and lock, then imported from there. Only the few calls the benchmarks and
 * the interop test make are typed here, so the project type-checks without the package installed.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

export const PEER_DIR = import.meta.dirname;
const ENTRY = join(PEER_DIR, 'node_modules/node-llama-cpp/dist/index.js');
/** npm's words for a registry it cannot reach. */
const UNREACHABLE = /ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network request to .* failed/;

/** Installs node-llama-cpp when absent. Resolves to why it cannot be, when the npm registry is out of reach; throws on any other failure. */
export async function ensurePeer(): Promise<{ ok: true } | { ok: false; reason: string }> {
  if (existsSync(ENTRY)) return { ok: true };
  try {
    await promisify(execFile)('npm', ['ci', '--no-audit', '--no-fund'], { cwd: PEER_DIR, maxBuffer: 64 << 20 });
  } catch (error) {
    const text = `${(error as Error).message}\n${(error as { stderr?: string }).stderr ?? ''}`;
    if (UNREACHABLE.test(text)) return { ok: false, reason: `node-llama-cpp cannot be installed: the npm registry is unreachable (${UNREACHABLE.exec(text)![0]})` };
    throw error;
  }
  return { ok: true };
}

/** A sequence of a context: tokens in, the model's tokens out. */
export interface PeerSequence {
  evaluate(tokens: number[], options: { temperature: number; yieldEogToken: boolean }): AsyncGenerator<number, void, void>;
  /** Forgets the sequence's tokens (its cache), for a fresh start. */
  clearHistory(): Promise<void>;
  dispose(): void;
}

/** A context holding `sequences` independent sequences evaluated in shared batches. */
export interface PeerContext {
  getSequence(): PeerSequence;
  dispose(): Promise<void>;
}

export interface PeerModel {
  createContext(options: { contextSize: number; sequences: number; threads?: number; batchSize?: number; flashAttention?: boolean }): Promise<PeerContext>;
  detokenize(tokens: number[]): string;
  dispose(): Promise<void>;
}

export interface PeerLlama {
  loadModel(options: { modelPath: string; gpuLayers?: number | 'max' }): Promise<PeerModel>;
  readonly gpu: string | false;
  dispose(): Promise<void>;
}

interface PeerModule {
  getLlama(options: Record<string, unknown>): Promise<PeerLlama>;
  getLlama(build: 'lastBuild', options?: Record<string, unknown>): Promise<PeerLlama>;
  LlamaLogLevel: Record<'error' | 'warn', unknown>;
}

/** llama.cpp through node-llama-cpp: its prebuilt CPU binary, or (`lastBuild`) the one `source build` made. */
export async function openPeer(kind: 'cpu' | 'lastBuild'): Promise<PeerLlama> {
  const peer = (await import(pathToFileURL(ENTRY).href)) as PeerModule;
  if (kind === 'lastBuild') return peer.getLlama('lastBuild', { logLevel: peer.LlamaLogLevel.error });
  return peer.getLlama({ gpu: false, build: 'never', skipDownload: true, logLevel: peer.LlamaLogLevel.error });
}

/** `steps` tokens chosen greedily after `prompt`, an end-of-generation token included and not stopped at. */
export async function peerGreedy(sequence: PeerSequence, prompt: number[], steps: number, onToken?: () => void): Promise<number[]> {
  const out: number[] = [];
  if (steps <= 0) return out;
  for await (const token of sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
    onToken?.();
    out.push(token);
    if (out.length >= steps) break;
  }
  return out;
}
