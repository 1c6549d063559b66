/**
 * A process using the cache as the model store does: once loaded it says `ready` and waits for a line
 * on stdin, then asks for the fallback checkpoint of gpt2 tiny (seed from argv[2]) and its build. Each
 * log line goes to stdout as it comes; the last line is `done <build dir>`.
 */
import { once } from 'node:events';
import { builtModelDirectory, fallbackCheckpoint } from '../../src/repository/index.ts';

const log = (line: string): void => void process.stdout.write(`${line}\n`);
log('ready');
await once(process.stdin, 'data');
process.stdin.destroy();
const checkpoint = await fallbackCheckpoint({ arch: 'gpt2', size: 'tiny', seed: Number(process.argv[2]) }, log);
log(`done ${await builtModelDirectory(checkpoint, {}, log)}`);
