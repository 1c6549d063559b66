export { argmax } from '../util/argmax.ts';
export { DecoderSession, positionsFromMask, type KvCache, type DecoderStep, type DecoderOutput } from './decoder-session.ts';
export { Seq2SeqSession, type Encoded, type Seq2SeqCache, type Seq2SeqOutput } from './seq2seq-session.ts';
export { selectCacheRows, selectEncodedRows, selectRows } from './select-rows.ts';
export { countNativeSession, createSession, exactFp32CudaOptions, releaseSession, openSessionCount, type ExecutionProviders } from './sessions.ts';
export { findGpus, findCudaLibraries, providerInstalled, installProvider, probeCuda, onnxRuntimeNode, providerFiles, type Check } from './cuda-setup.ts';
export { GreedySearchSession } from './greedy-session.ts';
