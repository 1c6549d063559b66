/**
 * Fails when modules under src/ import each other in a cycle. Only imports that exist at run time count
 * (`import type` is erased). Usage: tsx scripts/check-cycles.ts
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = fileURLToPath(new URL('../src/', import.meta.url));

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

const graph = new Map<string, string[]>();
for (const file of files(src)) {
  const text = readFileSync(file, 'utf8');
  const imports = [...text.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?from\s+'(\.[^']+)'/gms)].map((m) => resolve(dirname(file), m[1]!));
  graph.set(file, imports);
}

const state = new Map<string, 'visiting' | 'done'>();
const stack: string[] = [];
let cycle: string[] | undefined;
function visit(file: string): void {
  if (cycle) return;
  state.set(file, 'visiting');
  stack.push(file);
  for (const next of graph.get(file) ?? []) {
    if (state.get(next) === 'visiting') {
      cycle = [...stack.slice(stack.indexOf(next)), next];
      return;
    }
    if (!state.has(next)) visit(next);
    if (cycle) return;
  }
  stack.pop();
  state.set(file, 'done');
}
for (const file of graph.keys()) if (!state.has(file)) visit(file);
if (cycle) {
  process.stderr.write(`import cycle: ${cycle.map((f) => relative(src, f)).join(' -> ')}\n`);
  process.exitCode = 1;
} else {
  process.stdout.write(`no import cycles among ${graph.size} modules\n`);
}
