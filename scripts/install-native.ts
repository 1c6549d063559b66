/** npm install's native step: builds build/native/chorus_native.node for the CPU when it can, and prints one line (src/native/install.ts). */
import { installNative } from '../src/native/install.ts';

process.stdout.write(`${installNative()}\n`);
