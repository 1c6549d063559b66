export { readRepository, mapOf, diagnosticAt, type Repository, type Definition, type LoadedRepository, type RepositoryCheck } from './repository.ts';
export { loadRepository, REPOSITORY_CHECKS } from './validate.ts';
export { openTokenizerDefinition } from './open-tokenizer.ts';
export { resolveSource, cacheDir, isHubSource, type ResolvedSource } from './source.ts';
export { bundledRepositoryDir } from './bundled.ts';
export { builtModelDirectory, fallbackCheckpoint, isBuiltModel, isDecoderOnlySource } from './model-dir.ts';
export { applySourceOverrides, parseSourceOverride, type SourceOverride } from './overrides.ts';
export { fetchFromHub, hubUrl, hubOffline, type HubFetch } from './hub.ts';
export { fetchSource, isRemote, describeSource } from './fetch-source.ts';
