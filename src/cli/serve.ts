/**
 * `chorus serve`: the HTTP server over a repository (the bundled one by default, a directory, or
 * s3://bucket/prefix) on 127.0.0.1:8000, and KServe v2 gRPC on port 8001 (--grpc-port; 0 turns it off).
 * --model-control-mode as Triton's: explicit (models load on first use or by request), none (all load at
 * start, requests cannot load or unload), poll (as none, and every --repository-poll-secs the
 * repository's changes load, reload or unload models, in-flight requests finishing where they started).
 * SIGTERM or SIGINT stops it gracefully: no new connections, in-flight requests get until the deadline
 * to finish, then the rest is cancelled and the models unloaded; the process exits 0.
 * Each flag may come from the environment instead (CHORUS_HOST, CHORUS_PORT, ...: `SERVE_ENV`), for
 * containers; a flag on the command line wins.
 * `npm start` runs it with exec, so the signals npm passes on reach it.
 */
import { Option, type Command } from 'commander';
import { ChorusError, invalidArgument } from '../errors.ts';
import type { ModelControlMode } from '../ensemble/index.ts';
import { bundledRepositoryDir, isS3Repository, syncS3Repository } from '../repository/index.ts';
import { Metrics } from '../server/index.ts';
import { startGrpcServer } from '../server/grpc/index.ts';
import { RepositoryClient } from '../serving/index.ts';
import { httpThreadCount, httpThreadsRefused, startHttp } from './http-threads.ts';
import { sourceOverrides, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';

interface ServeOptions extends RepositoryOptions {
  host: string;
  port: string;
  grpcPort: string;
  modelControlMode: string;
  repositoryPollSecs: string;
  apiKey?: string;
  corsOrigin?: string;
  shutdownTimeout: string;
  load: string[];
  quiet?: boolean;
  httpThreads: string;
}

/** Flag -> the environment variable it falls back to (`--repository`'s is CHORUS_REPOSITORY). */
export const SERVE_ENV = {
  host: 'CHORUS_HOST',
  port: 'CHORUS_PORT',
  apiKey: 'CHORUS_API_KEY',
  corsOrigin: 'CHORUS_CORS_ORIGIN',
  shutdownTimeout: 'CHORUS_SHUTDOWN_TIMEOUT',
  load: 'CHORUS_LOAD',
  quiet: 'CHORUS_QUIET',
  grpcPort: 'CHORUS_GRPC_PORT',
  modelControlMode: 'CHORUS_MODEL_CONTROL_MODE',
  repositoryPollSecs: 'CHORUS_REPOSITORY_POLL_SECS',
  httpThreads: 'CHORUS_HTTP_THREADS',
} as const;

export function registerServe(program: Command): void {
  const command = program.command('serve');
  withRepositoryOptions(command);
  command
    .description('serve the repository over HTTP: KServe v2, Triton\'s generate extension, OpenAI-compatible routes, /metrics')
    .addOption(new Option('--host <host>', 'address to listen on').default('127.0.0.1').env(SERVE_ENV.host))
    .addOption(new Option('--port <port>', 'port to listen on').default('8000').env(SERVE_ENV.port))
    .addOption(new Option('--grpc-port <port>', 'port of the KServe v2 gRPC service (0: off)').default('8001').env(SERVE_ENV.grpcPort))
    .addOption(
      new Option('--model-control-mode <mode>', 'explicit (load on first use or by request), none (load all at start), poll (as none, and follow the repository\'s changes)')
        .default('explicit')
        .env(SERVE_ENV.modelControlMode),
    )
    .addOption(new Option('--repository-poll-secs <seconds>', 'poll mode: seconds between looks at the repository').default('15').env(SERVE_ENV.repositoryPollSecs))
    .addOption(new Option('--api-key <key>', 'require Authorization: Bearer <key> (default: none)').env(SERVE_ENV.apiKey))
    .addOption(new Option('--cors-origin <origin>', 'allow browsers from this origin (default: no CORS)').env(SERVE_ENV.corsOrigin))
    .addOption(new Option('--shutdown-timeout <seconds>', 'on SIGTERM, how long in-flight requests may take').default('30').env(SERVE_ENV.shutdownTimeout))
    .addOption(
      new Option('--load <models>', 'load these models (comma-separated; repeatable) before the port opens, so that a server that answers has them ready')
        .argParser((value: string, previous: string[]) => [...previous, ...value.split(',').map((name) => name.trim()).filter((name) => name !== '')])
        .default([] as string[], 'none: each on its first request')
        .env(SERVE_ENV.load),
    )
    .addOption(new Option('--quiet', 'no request log').env(SERVE_ENV.quiet))
    .addOption(
      new Option('--http-threads <n>', 'serve HTTP on n threads of its own, the engines staying on the main thread (1: HTTP on the main thread too; auto: 2 on machines of 8 cores or more, else 1)')
        .default('auto')
        .env(SERVE_ENV.httpThreads),
    )
    .action(async (options: ServeOptions) => {
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw invalidArgument('--port', 'an integer in [0, 65535]', options.port);
      const grpcPort = Number(options.grpcPort);
      if (!Number.isInteger(grpcPort) || grpcPort < 0 || grpcPort > 65535) throw invalidArgument('--grpc-port', 'an integer in [0, 65535] (0: no gRPC)', options.grpcPort);
      if (grpcPort !== 0 && grpcPort === port) throw invalidArgument('--grpc-port', `a port other than --port (${port})`, options.grpcPort);
      if (options.apiKey !== undefined && options.apiKey.trim() === '') throw invalidArgument('--api-key', `a key that is not empty (or leave it and ${SERVE_ENV.apiKey} out)`, options.apiKey);
      const deadline = Number(options.shutdownTimeout);
      if (!Number.isFinite(deadline) || deadline < 0) throw invalidArgument('--shutdown-timeout', 'a number of seconds >= 0', options.shutdownTimeout);
      const control = options.modelControlMode as ModelControlMode;
      if (!['none', 'explicit', 'poll'].includes(control)) throw invalidArgument('--model-control-mode', 'none, explicit or poll', options.modelControlMode);
      const pollSecs = Number(options.repositoryPollSecs);
      if (!Number.isFinite(pollSecs) || pollSecs <= 0) throw invalidArgument('--repository-poll-secs', 'a number of seconds > 0', options.repositoryPollSecs);
      const httpThreads = httpThreadCount(options.httpThreads);
      if (httpThreads === undefined) throw invalidArgument('--http-threads', 'auto or an integer in [1, 64]', options.httpThreads);
      const refused = httpThreadsRefused(httpThreads);
      if (refused !== undefined) throw new ChorusError('CHORUS_UNSUPPORTED', refused, { param: '--http-threads' });
      const log = (line: string): void => void process.stderr.write(`chorus: ${line}\n`);
      const remote = options.repository !== undefined && isS3Repository(options.repository) ? options.repository : undefined;
      const dir = remote === undefined ? (options.repository ?? bundledRepositoryDir()) : (await syncS3Repository(remote, log)).dir;
      const metrics = new Metrics();
      const client = RepositoryClient.open(dir, { sourceOverrides: sourceOverrides(options), control });
      if (control !== 'explicit') await client.loadAll();
      for (const model of options.load) {
        process.stderr.write(`chorus: loading ${model}\n`);
        await client.load(model);
      }
      const apiKey = options.apiKey;
      const server = { apiKey, corsOrigin: options.corsOrigin, logger: options.quiet ? false : { level: 'info' } };
      const grpc = grpcPort === 0 ? undefined : await startGrpcServer({ engine: client, host: options.host, port: grpcPort, apiKey, metrics }).catch(async (error: unknown) => {
        await client.close();
        throw error;
      });
      // One thread: the server on this one, beside the engines. More: HTTP threads of their own.
      const http = await startHttp({ count: httpThreads, client, metrics, host: options.host, port, server, log }).catch(async (error: unknown) => {
        grpc?.forceClose();
        await client.close();
        throw error;
      });
      const address = http.address;
      const stopPolling = control === 'poll' ? client.poll({ intervalSeconds: pollSecs, sync: remote === undefined ? undefined : () => syncS3Repository(remote, log) }) : undefined;
      await new Promise<void>((resolve) => {
        let stopping = false;
        const stop = (signal: string): void => {
          // A repeat is ignored: npm passes a terminal's Ctrl-C on to a process that got it already.
          if (stopping) return;
          stopping = true;
          process.stderr.write(`chorus: ${signal}: finishing in-flight requests (at most ${deadline} s)\n`);
          stopPolling?.();
          // Past the deadline, what still runs is cut off: connections closed, generation cancelled.
          const timer = setTimeout(() => {
            http.cutConnections();
            grpc?.forceClose();
            void client.close();
          }, deadline * 1000);
          void Promise.all([http.close(), grpc?.close()])
            .then(() => client.close())
            .finally(() => {
              clearTimeout(timer);
              resolve();
            });
        };
        process.on('SIGTERM', () => stop('SIGTERM'));
        process.on('SIGINT', () => stop('SIGINT'));
        // Announced once a signal is handled: whoever waits for this line may stop the server at once.
        process.stderr.write(`chorus: serving ${remote ?? client.source} on ${address}${httpThreads === 1 ? '' : ` (${httpThreads} HTTP threads)`}${grpc === undefined ? '' : ` and gRPC port ${grpc.port}`} (pipelines: ${client.models('pipeline').map((m) => m.name).join(', ')})\n`);
      });
      process.stderr.write('chorus: stopped\n');
    });
}

