export type { EngineClient, ModelInfo, ModelKind, ModelState, ModelStats, RequestDone, StepInfo, TensorInfo, TokenizerInfo, ChatMessage, Datatype, Element, PipelineUpdate, RequestMetrics, Tensor, TensorRecord, TextChoice, TextRequest, TokenLogProb } from './engine-client.ts';
export { RepositoryClient, type RepositoryClientOptions } from './repository-client.ts';
export { DATATYPES, tensor, tensorFromJson, wideElement } from './tensors.ts';
export { Channel, type ChannelHandlers } from './channel.ts';
export { ClientSnapshots, hostClient, ThreadClient, type ClientSnapshot, type HostedClient } from './thread-client.ts';
