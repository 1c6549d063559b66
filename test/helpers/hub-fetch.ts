/** Fetches the hub id argv[2] (HF_ENDPOINT, CHORUS_CACHE from the environment) and prints `ok`, or the error's code and message. */
import { fetchFromHub, resolveSource } from '../../src/repository/index.ts';

process.on('SIGXFSZ', () => {});
const source = resolveSource(`hf:${process.argv[2]}`, '.');
if (source?.kind !== 'hf') throw new Error(`not a hub id: ${process.argv[2]}`);
try {
  await fetchFromHub(source);
  process.stdout.write('ok\n');
} catch (error) {
  process.stdout.write(`${(error as { code?: string }).code}: ${(error as Error).message}\n`);
}
