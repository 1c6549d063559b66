/** The child process of build-process.ts: runs the one job it is sent, answers, and exits. */
import { buildModel, makeCheckpoint } from '../modelbuild/index.ts';
import type { BuildAnswer, BuildJob } from './build-process.ts';

process.once('message', (job: BuildJob) => {
  let answer: BuildAnswer;
  try {
    if (job.kind === 'build') buildModel(job.options);
    else makeCheckpoint(job.options);
    answer = { ok: true };
  } catch (error) {
    const e = error as { code?: unknown; message?: unknown; param?: unknown; value?: unknown };
    answer = {
      ok: false,
      code: typeof e.code === 'string' ? e.code : undefined,
      message: typeof e.message === 'string' ? e.message : String(error),
      param: typeof e.param === 'string' ? e.param : undefined,
      value: typeof e.value === 'string' || typeof e.value === 'number' ? e.value : undefined,
    };
  }
  process.send!(answer, () => process.exit(answer.ok ? 0 : 1));
});
// The parent gone (killed), there is nobody to answer: stop.
process.once('disconnect', () => process.exit(1));
