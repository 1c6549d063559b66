/**
 * The generation core runs no model: nothing it imports at run time (transitively) is ONNX Runtime or
 * the native addon, so its tests and the pure parts of Chorus load neither.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { ROOT } from '../helpers/paths.ts';

/** Every module the `entries` load at run time (`import type` is erased), and the packages they name. */
function runtimeImports(entries: string[]): { modules: Set<string>; packages: Set<string> } {
  const modules = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string): void => {
    if (modules.has(file)) return;
    modules.add(file);
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/^(?:import|export)\s+(?!type\b)(?:[^;]*?from\s+)?'([^']+)'/gms)) {
      const spec = m[1]!;
      if (spec.startsWith('.')) visit(resolve(dirname(file), spec));
      else packages.add(spec);
    }
  };
  for (const entry of entries) visit(entry);
  return { modules, packages };
}

test('no module of generation/core loads onnxruntime-node or the native addon', () => {
  const core = join(ROOT, 'src/generation/core');
  const files = readdirSync(core, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => join(core, f));
  assert.ok(files.some((f) => f.endsWith('beam-sequence.ts')) && files.some((f) => f.endsWith('top-p.ts')), 'every file, processors included');
  const { modules, packages } = runtimeImports(files);
  const inside = [...modules].map((file) => relative(ROOT, file));
  assert.deepEqual([...packages].filter((p) => p.startsWith('onnxruntime')), []);
  assert.deepEqual(inside.filter((file) => /^src\/(native|runtime)\/|generation\/engines\//.test(file)), []);
});

test('the walk sees through re-exports: the engines do load ONNX Runtime', () => {
  const { packages } = runtimeImports([join(ROOT, 'src/generation/engines/index.ts')]);
  assert.ok(packages.has('onnxruntime-node'));
});
