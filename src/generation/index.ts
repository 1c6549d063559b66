export * from './core/index.ts';
export * from './engines/index.ts';
