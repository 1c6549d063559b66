/** Where the shared models, tokenizers and data are (`../shared` beside the checkout). */
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const SHARED = fileURLToPath(new URL('../../../shared', import.meta.url));
export const TOKENIZERS = `${SHARED}/tokenizers`;
export const STORIES = `${SHARED}/models/stories260K`;
