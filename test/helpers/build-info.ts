/** What `chorus build` wrote of a model directory, for tests that check built graphs. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The `spec` of `dir`'s chorus_build.json, typed as the caller reads it. */
export function buildSpec<T>(dir: string): T {
  return (JSON.parse(readFileSync(join(dir, 'chorus_build.json'), 'utf8')) as { spec: T }).spec;
}
