/** The child process of build-process.ts: runs the one job it is sent, passes its log lines on, answers, and exits. */
import { buildModel, bytesText, makeCheckpoint, percentSteps } from '../modelbuild/index.ts';
import type { BuildAnswer, BuildJob, BuildMessage } from './build-process.ts';

const send = (message: BuildMessage, done: () => void = () => {}): void => void process.send!(message, done);
// Past a file-size limit (RLIMIT_FSIZE) a write then fails with EFBIG, answered, instead of killing the process.
process.on('SIGXFSZ', () => {});

process.once('message', (job: BuildJob) => {
  let answer: BuildAnswer;
  try {
    if (job.kind === 'build') {
      const { stats } = buildModel({
        ...job.options,
        onProgress: (stage, index, total) => send({ log: `building: ${stage} (${index + 1}/${total})` }),
        onWeights: percentSteps((percent, done, total) => send({ log: `building: ${percent}% of the weights written (${bytesText(done)} of ${bytesText(total)})` })),
      });
      send({ log: `built in ${stats.seconds} s, peak RSS ${bytesText(stats.peakRssBytes)}` });
    } else makeCheckpoint(job.options);
    answer = { ok: true };
  } catch (error) {
    answer = failure(error, job);
  }
  send(answer, () => process.exit(answer.ok ? 0 : 1));
});
// The parent gone (killed), there is nobody to answer: stop.
process.once('disconnect', () => process.exit(1));

/** The answer for an error: its code and message (a file the build needed and did not find, said so). */
function failure(error: unknown, job: BuildJob): BuildAnswer {
  const e = error as { code?: unknown; message?: unknown; param?: unknown; value?: unknown; path?: unknown };
  const what = job.kind === 'build' ? `building ${job.options.source}` : `making a ${job.options.arch} checkpoint`;
  if (e.code === 'ENOENT' && typeof e.path === 'string') return { ok: false, code: 'CHORUS_FILE_MISSING', message: `${what}: ${e.path} does not exist`, value: e.path };
  return {
    ok: false,
    code: typeof e.code === 'string' ? e.code : undefined,
    message: typeof e.message === 'string' ? e.message : String(error),
    param: typeof e.param === 'string' ? e.param : undefined,
    value: typeof e.value === 'string' || typeof e.value === 'number' ? e.value : undefined,
  };
}
