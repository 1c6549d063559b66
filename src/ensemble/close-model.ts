/** Closing a loaded model: at once, or once what runs on it has finished (a reload or removal). */
import { releaseSession } from '../runtime/index.ts';
import type { LoadedModel } from './model-store.ts';

/** Closes a model's engine or sessions; requests still running on it fail with CHORUS_CLOSED. */
export async function closeModel(model: LoadedModel): Promise<void> {
  if (model.engine === 'generate') await model.generator.close();
  else if (model.engine === 'encode') {
    model.batcher.close();
    await Promise.all(model.sessions.map((s) => s.close()));
  } else {
    model.batcher.close();
    await Promise.all(model.sessions.map((s) => releaseSession(s)));
  }
}

/** Closes a model once nothing runs or waits on it (checked every 50 ms). */
export async function retire(model: LoadedModel): Promise<void> {
  const busy = (): boolean => {
    if (model.engine !== 'generate') return model.batcher.busy;
    const stats = model.generator.stats();
    return stats.running + stats.waiting > 0;
  };
  while (busy()) await new Promise((resolve) => setTimeout(resolve, 50));
  await closeModel(model);
}
