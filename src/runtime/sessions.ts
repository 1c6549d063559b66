/**
 * Every ONNX Runtime session Chorus opens goes through here, so the count of open sessions is known:
 * unloading a model must bring it back down (tests and the admin API read it).
 */
import ort from 'onnxruntime-node';

let open = 0;

/**
 * fp32 means fp32: cuBLAS and cuDNN would otherwise run float32 matrix products in TF32 on Ampere and
 * later GPUs, and CUDA's greedy ids would drift from the CPU's. NVIDIA_TF32_OVERRIDE=0 turns that off
 * for the process (fp16 math is unaffected); set CHORUS_ALLOW_TF32=1 to keep TF32's speed instead.
 */
function keepFp32Exact(options: ort.InferenceSession.SessionOptions): void {
  const cuda = (options.executionProviders ?? []).some((p) => (typeof p === 'string' ? p : p.name) === 'cuda');
  if (cuda && !tf32Allowed()) process.env.NVIDIA_TF32_OVERRIDE = '0';
}

function tf32Allowed(): boolean {
  return process.env.CHORUS_ALLOW_TF32 === '1' || process.env.NVIDIA_TF32_OVERRIDE !== undefined;
}

/**
 * The same rule for sessions the native addon opens on CUDA: NVIDIA_TF32_OVERRIDE=0 for the process, and
 * ONNX Runtime's CUDA option use_tf32 off. Options that set use_tf32 themselves are left as they are.
 * Returns the CUDA options to pass.
 */
export function exactFp32CudaOptions(cudaOptions: Record<string, string | number> | undefined): Record<string, string | number> | undefined {
  if (cudaOptions?.use_tf32 !== undefined || (tf32Allowed() && process.env.NVIDIA_TF32_OVERRIDE !== '0')) return cudaOptions;
  process.env.NVIDIA_TF32_OVERRIDE = '0';
  return { use_tf32: 0, ...cudaOptions };
}

/** Opens a session on `file`. */
export async function createSession(file: string, options: ort.InferenceSession.SessionOptions): Promise<ort.InferenceSession> {
  keepFp32Exact(options);
  const session = await ort.InferenceSession.create(file, options);
  open++;
  return session;
}

/** Releases a session opened by `createSession`. */
export async function releaseSession(session: ort.InferenceSession): Promise<void> {
  await session.release();
  open--;
}

/** Counts a session the native addon opened (true) or released (false): its sessions are Chorus's too. */
export function countNativeSession(opened: boolean): void {
  open += opened ? 1 : -1;
}

/** Sessions opened and not yet released, in this process. */
export function openSessionCount(): number {
  return open;
}

/** Execution providers of a session: names ('cpu', 'cuda') or configurations ({ name: 'cuda', deviceId }). */
export type ExecutionProviders = ort.InferenceSession.ExecutionProviderConfig[];
