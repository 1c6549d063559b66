export { buildServer, type ServerOptions } from './app.ts';
export { Metrics } from './metrics.ts';
