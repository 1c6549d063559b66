export { Pipeline, type TextRequest, type TextChoice, type PipelineUpdate, type ChatMessage, type TokenLogProb } from './pipeline.ts';
export { Service, type ServiceOptions } from './service.ts';
export { pollRepository, type PollOptions } from './poll-repository.ts';
export type { RepositoryChanges } from './repository-diff.ts';
