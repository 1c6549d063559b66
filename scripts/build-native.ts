/** npm run build:native: builds build/native/chorus_native.node (see src/native/build.ts). */
import { buildNative } from '../src/native/build.ts';

const cuda = process.argv.includes('--no-cuda') ? false : process.argv.includes('--cuda') ? true : 'auto';
const result = buildNative({ cuda, log: (line) => process.stdout.write(`build:native: ${line}\n`) });
process.stdout.write(`build:native: done (${result.cuda ? 'with' : 'without'} CUDA kernels)\n`);
