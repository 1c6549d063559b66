/**
 * What the serving overhead bench shares with its server process: the stand-in's text (news articles
 * as GPT-2 ids), the prompts, and a client over a repository whose generate model is the stand-in.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TiktokenAdapter } from '../../src/tokenizers/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { RepositoryClient, type RequestDone } from '../../src/serving/index.ts';
import { Subject } from 'rxjs';
import { StandInEngine, standInRepository } from '../../test/helpers/stand-in-engine.ts';

export const ROOT = join(import.meta.dirname, '../..');
/** The news articles (SHARED: where ../shared is, as the GPU scripts take it). */
const ARTICLES = join(process.env.SHARED ?? join(ROOT, '../shared'), 'data/cnndm/summeval_cnndm_test100.jsonl');

export const tokenizer = new TiktokenAdapter({ encoding: 'gpt2' });

/** The news articles of ../shared/data. */
export function articles(): string[] {
  return readFileSync(ARTICLES, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => (JSON.parse(line) as { article: string }).article);
}

/** What the stand-in reads: the articles' GPT-2 ids, one after the other. */
export function textIds(): number[] {
  return articles().flatMap((a) => tokenizer.encode(`${a}\n\n`));
}

/** Up to 400 characters of each article, cut at a word. */
export function prompts(): string[] {
  return articles().map((a) => a.slice(0, 400).replace(/\s+\S*$/, ''));
}

/** The stand-in at one step every `stepMs`, for `maxBatchSize` rows. */
export function standIn(ids: readonly number[], stepMs: number, maxBatchSize: number, onRequestDone?: (metrics: RequestDone['metrics']) => void): StandInEngine {
  return new StandInEngine({ ids, vocabSize: tokenizer.vocabSize, endId: tokenizer.specialTokens.eos, stepMs, maxBatchSize, onRequestDone });
}

/** An engine client over a stand-in repository in `dir`: what `chorus serve` builds, the engine aside. */
export function standInClient(dir: string, stepMs: number, maxBatchSize: number): RepositoryClient {
  const ids = textIds();
  const done = new Subject<RequestDone>();
  const service = Service.open(standInRepository(dir, maxBatchSize), {
    log: () => {},
    onRequestDone: (model, metrics) => done.next({ model, metrics }),
    engine: (_name, _definition, onRequestDone) => standIn(ids, stepMs, maxBatchSize, onRequestDone),
  });
  return new RepositoryClient(service, done);
}

/**
 * bench/serve/server.ts in a process of its own over a stand-in of `maxBatchSize` rows stepping every
 * `stepMs` (its repository in a fresh temporary folder named from `prefix`); resolves with its URL once it listens.
 */
export async function standInServer(prefix: string, stepMs: number, maxBatchSize: number, env: NodeJS.ProcessEnv = process.env): Promise<{ url: string; server: ChildProcess }> {
  const args = ['--import', 'tsx', join(ROOT, 'bench/serve/server.ts'), mkdtempSync(join(tmpdir(), prefix)), String(stepMs), String(maxBatchSize)];
  const server = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'], env });
  const url = await new Promise<string>((resolve, reject) => {
    let said = '';
    server.stdout!.on('data', (chunk: Buffer) => {
      said += chunk.toString();
      const found = /listening on (\S+)/.exec(said);
      if (found) resolve(found[1]!);
    });
    server.once('exit', (code) => reject(new Error(`the server exited ${code}`)));
  });
  return { url, server };
}
