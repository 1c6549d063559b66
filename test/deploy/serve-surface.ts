/**
 * What `chorus serve` offers, read from its source of truth: the CLI's option definitions (flags, their
 * CHORUS_* variables and defaults) and the routes the server registers. And what a container asks of
 * it: the flags in its args and the variables in its environment, resolved as serve resolves them.
 */
import type { Option } from 'commander';
import { buildProgram } from '../../src/cli/main.ts';
import { RepositoryClient } from '../../src/serving/index.ts';
import { buildServer, Metrics } from '../../src/server/index.ts';
import { ROOT } from '../helpers/paths.ts';
import type { K8sObject } from './objects.ts';

/** The variables the server reads besides its flags' (the cache directory). */
export const OTHER_ENV = ['CHORUS_CACHE', 'CHORUS_ALLOW_TF32'];

export function serveOptions(): readonly Option[] {
  return buildProgram().commands.find((c) => c.name() === 'serve')!.options;
}

/** GET routes the server answers, from a server built over the ensembles fixture repository. */
export async function getRoutes(): Promise<(path: string) => boolean> {
  const metrics = new Metrics();
  const client = RepositoryClient.open(`${ROOT}test/fixtures/repositories/ensembles`, { log: () => {} });
  const app = await buildServer({ client, metrics });
  await app.ready();
  const has = (path: string): boolean => app.hasRoute({ method: 'GET', url: path });
  await app.close();
  await client.close();
  return has;
}

export interface Container {
  name: string;
  args?: string[];
  env?: Array<{ name: string; value?: string }>;
  envFrom?: Array<{ configMapRef?: { name: string } }>;
  ports?: Array<{ name?: string; containerPort: number }>;
  [field: string]: unknown;
}

export interface ServeSettings {
  /** Option attribute name -> its value as serve sees it (flag, else variable, else default). */
  values: Map<string, string>;
  /** Flags and CHORUS_* variables that serve does not have. */
  unknown: string[];
}

/** The settings `container` runs `chorus serve` with, its config maps (from `objects`) included. */
export function serveSettings(container: Container, objects: readonly K8sObject[]): ServeSettings {
  const options = serveOptions();
  const values = new Map<string, string>();
  const unknown: string[] = [];
  for (const option of options) if (typeof option.defaultValue === 'string') values.set(option.attributeName(), option.defaultValue);
  const env = new Map<string, string>();
  for (const source of container.envFrom ?? []) {
    const map = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === source.configMapRef?.name);
    if (map === undefined) unknown.push(`envFrom config map ${source.configMapRef?.name}`);
    for (const [name, value] of Object.entries(map?.data ?? {})) env.set(name, value);
  }
  for (const variable of container.env ?? []) env.set(variable.name, variable.value ?? '');
  for (const [name, value] of env) {
    const option = options.find((o) => o.envVar === name);
    if (option !== undefined) values.set(option.attributeName(), value);
    else if (name.startsWith('CHORUS_') && !OTHER_ENV.includes(name)) unknown.push(name);
  }
  const args = container.args ?? [];
  if (args[0] !== 'serve') unknown.push(`command ${args[0]}`);
  for (let i = 1; i < args.length; i++) {
    const [flag, inline] = args[i]!.split(/=(.*)/s) as [string, string | undefined];
    const option = options.find((o) => o.long === flag || o.short === flag);
    if (option === undefined) {
      unknown.push(flag);
      continue;
    }
    const value = option.required || option.optional ? (inline ?? args[++i] ?? '') : 'true';
    values.set(option.attributeName(), value);
  }
  return { values, unknown };
}
