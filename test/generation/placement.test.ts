import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ModelDefinition } from '../../src/config/index.ts';
import { continuousCoreWanted, instancePlacements } from '../../src/generation/index.ts';

const definition = (fields: Partial<ModelDefinition>): ModelDefinition => ({ engine: 'generate', source: './model', ...fields }) as ModelDefinition;
/** continuous_core as each instance of the definition gets it. */
const wanted = (fields: Partial<ModelDefinition>): boolean[] => instancePlacements(definition(fields)).map((placement) => continuousCoreWanted(definition(fields), placement));

test('the continuous core is on by default for instances on a GPU, off on the CPU', () => {
  assert.deepEqual(wanted({ device: 'cuda' }), [true]);
  assert.deepEqual(wanted({ device: 'cuda:1' }), [true]);
  assert.deepEqual(wanted({}), [false]);
  assert.deepEqual(wanted({ device: 'cuda', instance_group: [{ kind: 'cpu', count: 1 }, { kind: 'gpu', count: 1 }] }), [false, true]);
});

test('continuous_core given says it for every instance', () => {
  assert.deepEqual(wanted({ device: 'cuda', continuous_core: false }), [false]);
  assert.deepEqual(wanted({ continuous_core: true }), [true]);
});
