export { DecoderSession, argmax, positionsFromMask, type KvCache, type DecoderStep, type DecoderOutput } from './decoder-session.ts';
