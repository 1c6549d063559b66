/**
 * What the CPU comparison scripts share: seeded prompt ids, the median of three timed runs, and a
 * `chorus serve` of their own in a child process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { lastValueFrom, tap } from 'rxjs';
import type { EngineClient, TextRequest } from '../../src/serving/index.ts';

const ROOT = join(import.meta.dirname, '../..');

/** `count` prompts of `length` ids in [3, vocab), from a seeded linear congruential stream. */
export function randomPrompts(count: number, vocab: number, length: number): number[][] {
  let state = 12345;
  return Array.from({ length: count }, () =>
    Array.from({ length }, () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return 3 + ((state >>> 8) % (vocab - 3));
    }),
  );
}

/** The median of three measurements, after a warm-up one. */
export async function medianOfThree(measure: () => Promise<number>): Promise<number> {
  await measure();
  const values: number[] = [];
  for (let i = 0; i < 3; i++) values.push(await measure());
  return values.sort((a, b) => a - b)[1]!;
}

/** Seconds of a run: the median of three, after a warm-up run. */
export function timeIt(run: () => Promise<unknown>): Promise<number> {
  return medianOfThree(async () => {
    const started = performance.now();
    await run();
    return (performance.now() - started) / 1000;
  });
}

/** `chorus serve` over `repository` in its own process (no gRPC port); resolves to its URL. */
export async function serve(repository: string, flags: string[] = []): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/chorus.js'), 'serve', '--repository', repository, '--port', '0', '--grpc-port', '0', '--quiet', ...flags], { stdio: ['ignore', 'ignore', 'pipe'] });
  const url = await new Promise<string>((resolve, reject) => {
    let log = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      log += chunk.toString();
      const found = /on (http:\/\/\S+)/.exec(log);
      if (found) resolve(found[1]!);
    });
    child.once('exit', (code) => reject(new Error(`chorus serve exited ${code}: ${log}`)));
  });
  return { url, child };
}

/**
 * Output tokens/s of `requests` requests through the engine client, from `streams` clients each sending
 * the next request as its last ends; `request(n)` is the n-th request. With each streamed request's
 * milliseconds to its first text, in order.
 */
export async function clientRate(client: EngineClient, pipeline: string, streams: number, requests: number, request: (n: number) => TextRequest): Promise<{ tokensPerS: number; ttftMs: number[] }> {
  let issued = 0;
  let tokens = 0;
  const ttftMs: number[] = [];
  const started = performance.now();
  const worker = async (): Promise<void> => {
    while (issued < requests) {
      const sent = performance.now();
      let first: number | undefined;
      const last = await lastValueFrom(
        client.generate(pipeline, request(issued++)).pipe(
          tap((u) => {
            if (first === undefined && (u.choices[0]?.delta ?? '') !== '') first = performance.now() - sent;
          }),
        ),
      );
      if (first !== undefined) ttftMs.push(first);
      tokens += last.usage?.completionTokens ?? 0;
    }
  };
  await Promise.all(Array.from({ length: streams }, worker));
  ttftMs.sort((a, b) => a - b);
  return { tokensPerS: tokens / ((performance.now() - started) / 1000), ttftMs };
}
