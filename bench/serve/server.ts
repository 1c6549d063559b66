/**
 * `chorus serve`'s HTTP server (buildServer, metrics, no request log as with --quiet) over a stand-in
 * engine, in a process of its own; prints `listening on <url>` and runs until SIGTERM. With
 * SERVE_PROFILE=<dir>, a CPU profile of its main thread from the port's opening to SIGTERM goes there.
 * With SERVE_HTTP_THREADS=<n> (n > 1), HTTP on n threads of its own (`chorus serve --http-threads`).
 * Usage: node --import tsx bench/serve/server.ts <repository-dir> <step-ms> <max-batch-size>
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import { startHttp } from '../../src/cli/http-threads.ts';
import { Metrics } from '../../src/server/index.ts';
import { standInClient } from './stand-in.ts';

const [dir, stepMs, batch] = process.argv.slice(2) as [string, string, string];
const client = standInClient(dir, Number(stepMs), Number(batch));
await client.load('stand-in');
const http = await startHttp({ count: Number(process.env.SERVE_HTTP_THREADS ?? 1), client, metrics: new Metrics(), host: '127.0.0.1', port: 0, server: { logger: false }, log: (line) => console.error(line) });
const url = http.address;
const profileDir = process.env.SERVE_PROFILE;
const session = profileDir === undefined ? undefined : new Session();
if (session !== undefined) {
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
}
process.stdout.write(`listening on ${url}\n`);
process.once('SIGTERM', () => {
  void (async () => {
    if (session !== undefined) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(join(profileDir!, `serve-overhead-${process.pid}.cpuprofile`), JSON.stringify(profile));
    }
    await http.close();
    await client.close();
    process.exit(0);
  })();
});
