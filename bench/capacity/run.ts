/**
 * Prints docs/deploy.md's capacity plan from the figures in bench/results/ (no measurement of its own).
 * Usage: node --import tsx bench/capacity/run.ts [requests/s] [tokens per request] [p99 TTFT, s]
 */
import { join } from 'node:path';
import { DOCS_LOAD, measuredFigures, plan, planMarkdown, type Load } from './plan.ts';

const [rate, tokens, ttft] = process.argv.slice(2).map(Number);
const load: Load = { requestsPerS: rate ?? DOCS_LOAD.requestsPerS, tokensPerRequest: tokens ?? DOCS_LOAD.tokensPerRequest, p99FirstTokenS: ttft ?? DOCS_LOAD.p99FirstTokenS };
for (const [name, value] of Object.entries(load)) if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got ${value}`);
const figures = measuredFigures(join(import.meta.dirname, '../results'));
process.stdout.write(`${planMarkdown([plan(figures.h100Engine, load), plan(figures.h100, load), plan(figures.cpu, load)], load)}\n`);
