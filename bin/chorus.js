#!/usr/bin/env node
// Runs the TypeScript CLI through tsx's loader.
import { register } from 'tsx/esm/api';

// Past a file-size limit (RLIMIT_FSIZE) a write fails with EFBIG, which the command answers, instead of killing it.
process.on('SIGXFSZ', () => {});
register();
const { run } = await import('../src/cli/main.ts');
process.exitCode = await run(process.argv.slice(2));
