export { Pipeline, type TextRequest, type TextChoice, type PipelineUpdate, type ChatMessage, type TokenLogProb } from './pipeline.ts';
export { Service, type ServiceOptions } from './service.ts';
