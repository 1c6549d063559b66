/**
 * Every ONNX Runtime session Chorus opens goes through here, so the count of open sessions is known:
 * unloading a model must bring it back down (tests and the admin API read it).
 */
import ort from 'onnxruntime-node';

let open = 0;

/** Opens a session on `file`. */
export async function createSession(file: string, options: ort.InferenceSession.SessionOptions): Promise<ort.InferenceSession> {
  const session = await ort.InferenceSession.create(file, options);
  open++;
  return session;
}

/** Releases a session opened by `createSession`. */
export async function releaseSession(session: ort.InferenceSession): Promise<void> {
  await session.release();
  open--;
}

/** Sessions opened and not yet released, in this process. */
export function openSessionCount(): number {
  return open;
}
