/** A tokenizer pool's thread: opens the tokenizer definition it is given, then encodes texts as they come. */
import { parentPort, workerData } from 'node:worker_threads';
import { ChorusError } from '../errors.ts';
import { openTokenizerDefinition } from './open-tokenizer.ts';
import type { PoolAnswer, PoolWorkerData } from './tokenizer-pool.ts';

const data = workerData as PoolWorkerData;
const tokenizer = await openTokenizerDefinition(data.name, data.definition, data.repositoryDir);
const port = parentPort!;
port.on('message', (request: { id: number; text: string; addSpecialTokens?: boolean }) => {
  let answer: PoolAnswer;
  try {
    const ids = Int32Array.from(tokenizer.encode(request.text, request.addSpecialTokens === undefined ? undefined : { addSpecialTokens: request.addSpecialTokens }));
    port.postMessage({ id: request.id, ids } satisfies PoolAnswer, [ids.buffer]);
    return;
  } catch (error) {
    const e = error as Error;
    answer = { id: request.id, error: e instanceof ChorusError ? { message: e.message, code: e.code, ...(e.param === undefined ? {} : { param: e.param }) } : { message: e.message } };
  }
  port.postMessage(answer);
});
port.postMessage({ ready: true } satisfies PoolAnswer);
