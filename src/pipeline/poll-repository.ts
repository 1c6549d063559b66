/**
 * Triton's poll mode: every interval, bring the repository up to date (an S3 repository is synced
 * first) and apply its changes to the running service. Rounds never overlap; a round that fails (S3
 * unreachable, a definition broken) is logged and the service keeps what it had.
 */
import type { RepositoryChanges } from './repository-diff.ts';
import type { Service } from './service.ts';

export interface PollOptions {
  /** Seconds between the end of one round and the start of the next. */
  intervalSeconds: number;
  /** Runs before each round (fetching a remote repository's changes). Default: nothing. */
  sync?: () => Promise<unknown>;
  /** Each round that changed something, and each failure. Default: stderr. */
  log?: (line: string) => void;
  /** After every round, with what it changed (none on failure). */
  onRound?: (changes: RepositoryChanges | undefined) => void;
}

/** Starts polling; the returned function stops it (a round under way finishes). */
export function pollRepository(service: Service, options: PollOptions): () => void {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const round = async (): Promise<void> => {
    let changes: RepositoryChanges | undefined;
    try {
      await options.sync?.();
      changes = await service.refresh();
      const parts = (['added', 'changed', 'removed'] as const).filter((k) => changes![k].length > 0).map((k) => `${k} ${changes![k].join(', ')}`);
      if (parts.length > 0) log(`chorus: repository ${service.repository.dir}: models ${parts.join('; ')}`);
    } catch (error) {
      log(`chorus: polling the repository failed, keeping what is served: ${(error as Error).message}`);
    }
    options.onRound?.(changes);
    if (!stopped) timer = setTimeout(() => void round(), options.intervalSeconds * 1000);
  };
  timer = setTimeout(() => void round(), options.intervalSeconds * 1000);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
