/**
 * Builds and fallback checkpoints run in a child process: the server's event loop keeps answering
 * (and keeps the cache entry's lock fresh) while a model builds, and a build that runs out of memory or
 * dies takes only its own process down.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ChorusError, type ErrorCode } from '../errors.ts';
import type { BuildOptions, MakeCheckpointOptions } from '../modelbuild/index.ts';

/** What the child process makes: a build (buildModel) or a random checkpoint (makeCheckpoint). */
export type BuildJob = { kind: 'build'; options: Omit<BuildOptions, 'onProgress'> } | { kind: 'checkpoint'; options: MakeCheckpointOptions };

/** The child's answer: done, or the error it failed with. */
export type BuildAnswer = { ok: true } | { ok: false; code?: string; message: string; param?: string; value?: unknown };
/** What the child sends: log lines (build progress) as they come, then its answer. */
export type BuildMessage = BuildAnswer | { log: string };

const MAIN = fileURLToPath(new URL('./build-process-main.ts', import.meta.url));

/** Runs `job` in a child process, its log lines told to `log`; rejects with the child's error, or naming how it died. */
export function runBuildJob(job: BuildJob, log: (line: string) => void = () => {}): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = fork(MAIN, [], { execArgv: ['--import', import.meta.resolve('tsx')], stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced' });
    let answer: BuildAnswer | undefined;
    child.on('message', (message: BuildMessage) => {
      if ('log' in message) log(message.log);
      else answer = message;
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (answer?.ok === true) return resolve();
      if (answer !== undefined) return reject(childError(answer));
      const how = signal !== null ? `was killed by ${signal}${signal === 'SIGKILL' ? ' (out of memory?)' : ''}` : `exited with code ${code}`;
      reject(new ChorusError('CHORUS_CACHE_FAILED', `the process writing ${job.options.out} ${how} before it finished`, { value: job.options.out }));
    });
    child.send(job);
  });
}

/** The child's error as the parent throws it: a ChorusError again, or an Error keeping its system code (ENOSPC, ...). */
function childError(answer: Extract<BuildAnswer, { ok: false }>): Error {
  if (answer.code?.startsWith('CHORUS_')) return new ChorusError(answer.code as ErrorCode, answer.message, { param: answer.param, value: answer.value });
  return Object.assign(new Error(answer.message), { code: answer.code });
}
