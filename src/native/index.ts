/**
 * The native engine's addon, when it is built (`npm run build:native`). Loading it never throws: a
 * missing or unloadable addon gives `undefined` and the reason, and Chorus runs the TypeScript engine.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import 'onnxruntime-node'; // loads libonnxruntime.so.1, which the addon links to
import { NATIVE_ADDON } from './build.ts';

/** Options of the addon's SlotDecoder (see src/native/slot-decoder.h). */
export interface SlotDecoderOptions {
  model: string;
  provider: 'cpu' | 'cuda';
  deviceId?: number;
  slots: number;
  maxLength: number;
  layers: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  dtype: 'fp32' | 'fp16';
  intraOpThreads?: number;
  /** CUDA: capture each batch size's decode step as a CUDA graph and replay it. */
  cudaGraph?: boolean;
  /** ONNX Runtime's CUDA provider options by their names (gpu_mem_limit, arena_extend_strategy, ...). */
  cudaOptions?: Record<string, string | number>;
}

/** What a step gives back: each row's argmax, and the asked rows' logits (float32, row after row). */
export interface SlotStep {
  argmax: Int32Array;
  logits: Float32Array;
}

/** The slot decoder: its cache of slots lives where the session runs. */
export interface NativeSlotDecoder {
  load(): Promise<void>;
  /** Runs a prompt into `slot` from position 0. */
  prefill(slot: number, ids: Int32Array, logitRows: Int32Array): Promise<SlotStep>;
  /** One token for rows (slots) 0..n-1, each at its position (its length so far). */
  decode(tokens: Int32Array, positions: Int32Array, logitRows: Int32Array): Promise<SlotStep>;
  /** dst[i] <- src[i] (their first lengths[i] positions); a permutation is safe. */
  copySlots(sources: Int32Array, destinations: Int32Array, lengths: Int32Array): Promise<void>;
  close(): void;
  readonly cacheBytes: number;
  /** Milliseconds so far inside ONNX Runtime's runs, and inside the decoder's calls in all (runs, argmax, copies). */
  readonly sessionMs: number;
  readonly callMs: number;
}

export interface NativeAddon {
  SlotDecoder: new (options: SlotDecoderOptions) => NativeSlotDecoder;
  /** Each row's argmax (the lowest index among equals): on the GPU with `device`, else on the host. */
  argmaxRows(logits: Float32Array | Uint16Array, vocab: number, device: boolean): Int32Array;
  cudaDevices(): number;
  /** Whether it was built with the CUDA kernels. */
  cuda: boolean;
  ortApiVersion: number;
}

let loaded: { addon: NativeAddon | undefined; reason: string } | undefined;

/** The addon, or undefined and why not. CHORUS_NATIVE=0 turns it off. */
export function loadNative(): { addon: NativeAddon | undefined; reason: string } {
  if (loaded !== undefined) return loaded;
  if (process.env.CHORUS_NATIVE === '0') loaded = { addon: undefined, reason: 'turned off by CHORUS_NATIVE=0' };
  else if (!existsSync(NATIVE_ADDON)) loaded = { addon: undefined, reason: `not built (npm run build:native writes ${NATIVE_ADDON})` };
  else {
    try {
      loaded = { addon: createRequire(import.meta.url)(NATIVE_ADDON) as NativeAddon, reason: 'built' };
    } catch (error) {
      loaded = { addon: undefined, reason: `${NATIVE_ADDON} does not load: ${(error as Error).message}` };
    }
  }
  return loaded;
}
