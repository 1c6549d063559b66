#!/usr/bin/env node
// Runs the TypeScript CLI through tsx's loader.
import { register } from 'tsx/esm/api';

register();
const { run } = await import('../src/cli/main.ts');
process.exitCode = await run(process.argv.slice(2));
