/**
 * `chorus serve`: the HTTP server over a repository (the bundled one by default) on 127.0.0.1:8000.
 * SIGTERM or SIGINT stops it gracefully: no new connections, in-flight requests get until the deadline
 * to finish, then the rest is cancelled and the models unloaded; the process exits 0. `npm start` runs
 * it with exec, so the signals npm passes on reach it.
 */
import type { Command } from 'commander';
import { invalidArgument } from '../errors.ts';
import { Service } from '../pipeline/index.ts';
import { bundledRepositoryDir } from '../repository/index.ts';
import { buildServer, Metrics } from '../server/index.ts';
import { sourceOverrides, withRepositoryOptions, type RepositoryOptions } from './repository-options.ts';

interface ServeOptions extends RepositoryOptions {
  host: string;
  port: string;
  apiKey?: string;
  corsOrigin?: string;
  shutdownTimeout: string;
  quiet?: boolean;
}

export function registerServe(program: Command): void {
  const command = program.command('serve');
  withRepositoryOptions(command);
  command
    .description('serve the repository over HTTP: KServe v2, Triton\'s generate extension, OpenAI-compatible routes, /metrics')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on', '8000')
    .option('--api-key <key>', 'require Authorization: Bearer <key> (default: $CHORUS_API_KEY, else none)')
    .option('--cors-origin <origin>', 'allow browsers from this origin (default: no CORS)')
    .option('--shutdown-timeout <seconds>', 'on SIGTERM, how long in-flight requests may take', '30')
    .option('--quiet', 'no request log')
    .action(async (options: ServeOptions) => {
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw invalidArgument('--port', 'an integer in [0, 65535]', options.port);
      const deadline = Number(options.shutdownTimeout);
      if (!Number.isFinite(deadline) || deadline < 0) throw invalidArgument('--shutdown-timeout', 'a number of seconds >= 0', options.shutdownTimeout);
      const metrics = new Metrics();
      const service = Service.open(options.repository ?? bundledRepositoryDir(), { sourceOverrides: sourceOverrides(options), onRequestDone: (model, m) => metrics.generation(model, m) });
      const app = await buildServer({ service, metrics, apiKey: options.apiKey ?? process.env.CHORUS_API_KEY, corsOrigin: options.corsOrigin, logger: options.quiet ? false : { level: 'info' } });
      const address = await app.listen({ host: options.host, port });
      process.stderr.write(`chorus: serving ${service.repository.dir} on ${address} (pipelines: ${[...service.repository.pipelines.keys()].join(', ')})\n`);
      await new Promise<void>((resolve) => {
        let stopping = false;
        const stop = (signal: string): void => {
          // A repeat is ignored: npm passes a terminal's Ctrl-C on to a process that got it already.
          if (stopping) return;
          stopping = true;
          process.stderr.write(`chorus: ${signal}: finishing in-flight requests (at most ${deadline} s)\n`);
          // Past the deadline, what still runs is cut off: connections closed, generation cancelled.
          const timer = setTimeout(() => {
            app.server.closeAllConnections();
            void service.close();
          }, deadline * 1000);
          void app
            .close()
            .then(() => service.close())
            .finally(() => {
              clearTimeout(timer);
              resolve();
            });
        };
        process.on('SIGTERM', () => stop('SIGTERM'));
        process.on('SIGINT', () => stop('SIGINT'));
      });
      process.stderr.write('chorus: stopped\n');
    });
}
