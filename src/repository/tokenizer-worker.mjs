// A tokenizer pool's thread (tokenizer-pool.ts): TypeScript through tsx's loader, as bin/chorus.js runs it.
import { register } from 'tsx/esm/api';

register();
await import('./tokenizer-worker-main.ts');
