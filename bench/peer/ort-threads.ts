/**
 * ONNX Runtime's intra-op threads for every session this process opens, from CHORUS_ORT_THREADS (Chorus
 * leaves ONNX Runtime's default, one spinning thread per core). For measurements only: on a machine whose
 * cores other processes also use, spinning pool threads wait for each other's time slices.
 */
import * as ort from 'onnxruntime-node';

export function applyOrtThreads(): number | undefined {
  if (process.env.CHORUS_ORT_THREADS === undefined) return undefined;
  const intraOpNumThreads = Number(process.env.CHORUS_ORT_THREADS);
  const create = ort.InferenceSession.create.bind(ort.InferenceSession) as (file: string, options?: ort.InferenceSession.SessionOptions) => Promise<ort.InferenceSession>;
  (ort.InferenceSession as { create: unknown }).create = (file: string, options: ort.InferenceSession.SessionOptions = {}) => create(file, { ...options, intraOpNumThreads });
  return intraOpNumThreads;
}
