import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom } from 'rxjs';
import { GraphBuilder } from '../../src/modelbuild/graph.ts';
import { Service } from '../../src/pipeline/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** An ONNX model: doubled = x * 2 (float32 [batch, 3]) and total = sum of x over its row, plus n (int64) passed through + 1. */
function writeModel(file: string): void {
  const g = new GraphBuilder('float32');
  const x = g.input('x', 'float32', ['batch', 3]);
  const n = g.input('n', 'int64', ['batch', 1]);
  g.output('doubled', g.op('Mul', [x, g.floatConstant([2], [])]), 'float32', ['batch', 3]);
  g.output('total', g.op('ReduceSum', [x, g.constantOf('int64', [1])], { keepdims: 1 }), 'float32', ['batch', 1]);
  g.output('next', g.op('Add', [n, g.constantOf('int64', [1], [])]), 'int64', ['batch', 1]);
  writeFileSync(file, g.serialize().model);
}

test('forward steps run any ONNX model on tensors by name, batched dynamically', async () => {
  const dir = scratchDir('chorus-forward-');
  for (const folder of ['models', 'ensembles']) mkdirSync(join(dir, folder));
  writeModel(join(dir, 'double.onnx'));
  writeFileSync(join(dir, 'models/double.yaml'), 'engine: forward\nsource: double.onnx\nmax_batch_size: 8\ndynamic_batching: { max_queue_delay_microseconds: 100000, preferred_batch_size: [4] }\n');
  writeFileSync(
    join(dir, 'ensembles/double.yaml'),
    `inputs:\n  X: { datatype: FP32, dims: [3] }\n  N: { datatype: INT64, dims: [1] }\noutputs:\n  Y: { datatype: FP32, dims: [3] }\n  S: { datatype: FP32, dims: [1] }\n  M: { datatype: INT64, dims: [1] }\nsteps:\n  - name: run\n    forward: double\n    inputs: { x: X, n: N }\n    outputs: { doubled: Y, total: S, next: M }\n`,
  );
  const service = Service.open(dir, { log: () => {} });
  const request = (i: number) =>
    lastValueFrom(service.ensemble('double').run({ X: { datatype: 'FP32', shape: [1, 3], data: [i, i + 1, i + 2] }, N: { datatype: 'INT64', shape: [1, 1], data: [i] } }));
  const outputs = await Promise.all([0, 1, 2, 3].map(request));
  outputs.forEach((out, i) => {
    assert.deepEqual(out.Y, { datatype: 'FP32', shape: [1, 3], data: [2 * i, 2 * i + 2, 2 * i + 4] });
    assert.deepEqual(out.S, { datatype: 'FP32', shape: [1, 1], data: [3 * i + 3] });
    assert.deepEqual(out.M, { datatype: 'INT64', shape: [1, 1], data: [i + 1] });
  });
  const model = await service.store.model('double');
  assert.ok(model.engine === 'forward');
  assert.deepEqual(model.batcher.stats, { executions: 1, requests: 4, rows: 4 });
  await service.close();
});
