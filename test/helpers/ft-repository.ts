/**
 * The bundled repository with its generate models on tiny seeded checkpoints (vocabulary 512): the
 * bundled FT ensembles exactly as shipped, answering in milliseconds. Token ids sent to them stay
 * below 512.
 */
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundledRepositoryDir } from '../../src/repository/index.ts';
import { scratchDir } from './scratch.ts';

/** Architecture of each bundled generate model's tiny stand-in. */
const TINY: Record<string, string> = { gpt2: 'gpt2', 't5-small': 't5', 'bart-large-cnn': 'bart', 't5-encoder': 't5' };

export function tinyFtRepository(): string {
  const repository = join(scratchDir('chorus-ft-'), 'repo');
  for (const kind of ['tokenizers', 'models', 'ensembles', 'pipelines']) cpSync(join(bundledRepositoryDir(), kind), join(repository, kind), { recursive: true });
  for (const [name, arch] of Object.entries(TINY)) {
    const engine = name === 't5-encoder' ? 'encode' : 'generate';
    writeFileSync(join(repository, `models/${name}.yaml`), `engine: ${engine}\nsource: hf:chorus-test/absent-${name}\ntokenizer: gpt2\nfallback: { arch: ${arch}, size: tiny, seed: 7 }\n`);
  }
  return repository;
}
