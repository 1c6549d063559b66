import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, openSync, closeSync, ftruncateSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel, makeCheckpoint, readSafetensors, writeSafetensors, type Tensor } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

const root = scratchDir('chorus-safetensors-');

/** A llama checkpoint split into three shards (F32, F16 and BF16) with its index; the shard files' names. */
function sharded(name: string): { dir: string; shards: string[]; weightMap: Record<string, string> } {
  const source = join(root, `${name}-source`);
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 6, out: source });
  const tensors = readSafetensors(join(source, 'model.safetensors'));
  const dir = join(root, name);
  mkdirSync(dir);
  copyFileSync(join(source, 'config.json'), join(dir, 'config.json'));
  const names = [...tensors.keys()];
  const dtypes = ['F32', 'F16', 'BF16'] as const;
  const shards = dtypes.map((_, i) => `model-0000${i + 1}-of-00003.safetensors`);
  const weightMap: Record<string, string> = {};
  dtypes.forEach((dtype, i) => {
    const part = names.filter((_, n) => n % 3 === i);
    writeSafetensors(join(dir, shards[i]!), new Map(part.map((n) => [n, tensors.get(n)!])), { dtype });
    for (const n of part) weightMap[n] = shards[i]!;
  });
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
  return { dir, shards, weightMap };
}

test('tensors are read lazily, whole or in ranges, in each dtype', () => {
  const values = Float32Array.from({ length: 24 }, (_, i) => (i - 12) / 8); // exact in F16 and BF16
  for (const dtype of ['F32', 'F16', 'BF16'] as const) {
    const file = join(root, `range-${dtype}.safetensors`);
    writeSafetensors(file, new Map<string, Tensor>([['a', { dims: [4, 6], data: values }], ['b', { dims: [2], data: Float32Array.of(1, 2) }]]), { dtype });
    const a = readSafetensors(file).get('a')!;
    assert.equal(a.dtype, dtype);
    assert.deepEqual(Array.from(a.data), Array.from(values));
    assert.deepEqual(Array.from(a.read!(7, 5)), Array.from(values.subarray(7, 12)));
  }
});

test('a sharded checkpoint of F32, F16 and BF16 shards builds the model its one-file copy builds', async () => {
  const { dir, weightMap } = sharded('mixed');
  const single = join(root, 'mixed-single');
  mkdirSync(single);
  copyFileSync(join(dir, 'config.json'), join(single, 'config.json'));
  const all = new Map<string, Tensor>();
  for (const shard of new Set(Object.values(weightMap))) for (const [n, t] of readSafetensors(join(dir, shard))) all.set(n, t);
  writeSafetensors(join(single, 'model.safetensors'), all);
  buildModel({ source: dir, out: `${dir}-onnx` });
  buildModel({ source: single, out: `${single}-onnx` });
  const [a, b] = [await DecoderSession.open(`${dir}-onnx`), await DecoderSession.open(`${single}-onnx`)];
  const step = { inputIds: [[1, 2, 3, 4]] };
  assert.deepEqual((await a.run(step)).logits, (await b.run(step)).logits);
  await a.close();
  await b.close();
});

test('a missing shard is named, with a tensor it should hold', () => {
  const { dir, shards, weightMap } = sharded('missing');
  rmSync(join(dir, shards[1]!));
  const held = Object.keys(weightMap).find((n) => weightMap[n] === shards[1])!;
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), (error: Error & { code?: string }) => {
    assert.equal(error.code, 'CHORUS_FILE_MISSING');
    assert.ok(error.message.includes(`shard ${shards[1]} is missing`), error.message);
    assert.ok(error.message.includes(held), error.message);
    return true;
  });
});

test('an index that lists a tensor its shard does not hold is refused, naming both', () => {
  const { dir, shards, weightMap } = sharded('misfiled');
  const name = Object.keys(weightMap).find((n) => weightMap[n] === shards[0])!;
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { ...weightMap, [name]: shards[2] } }));
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { code: 'CHORUS_FILE_INVALID', message: new RegExp(`lists ${name.replaceAll('.', '\\.')} in ${shards[2]!.replaceAll('.', '\\.')}, which does not hold it`) });
});

test('a truncated file is refused with the bytes its header needs and the bytes it has', () => {
  const dir = join(root, 'truncated');
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 6, out: dir });
  const file = join(dir, 'model.safetensors');
  const size = statSync(file).size;
  const fd = openSync(file, 'r+');
  ftruncateSync(fd, size - 1000);
  closeSync(fd);
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { code: 'CHORUS_FILE_INVALID', message: `${file} is truncated: its header needs ${size} bytes, the file has ${size - 1000}; download it again` });
  writeFileSync(file, readFileSync(file).subarray(0, 5));
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx` }), { message: `${file} is truncated: its 8-byte header length needs 8 bytes, the file has 5; download it again` });
});

test('a weight in a dtype that cannot be read is named with its dtype and the supported ones; an unused buffer in one is skipped', () => {
  const dir = join(root, 'int-weight');
  makeCheckpoint({ arch: 'gpt2', size: 'tiny', seed: 6, out: dir });
  const file = join(dir, 'model.safetensors');
  const retyped = (name: string, dtype: string, width: number): void => {
    const bytes = readFileSync(file);
    const headerLength = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
    const entry = header[name]!;
    entry.dtype = dtype;
    entry.shape = [(entry.data_offsets[1] - entry.data_offsets[0]) / width];
    let json = JSON.stringify(header);
    json += ' '.repeat(Math.max(0, headerLength - json.length));
    assert.equal(json.length, headerLength);
    writeFileSync(file, Buffer.concat([bytes.subarray(0, 8), Buffer.from(json), bytes.subarray(8 + headerLength)]));
  };
  // An old GPT-2 checkpoint's causal-mask buffer, as bytes (U8), is skipped like any such buffer.
  const withBuffer = readSafetensors(file);
  withBuffer.set('transformer.h.0.attn.bias', { dims: [16], data: new Float32Array(16) });
  writeSafetensors(file, withBuffer);
  retyped('transformer.h.0.attn.bias', 'U8', 1);
  buildModel({ source: dir, out: `${dir}-onnx` });
  retyped('transformer.ln_f.bias', 'I32', 4);
  assert.throws(() => buildModel({ source: dir, out: `${dir}-onnx2` }), {
    code: 'CHORUS_UNSUPPORTED',
    message: /tensor transformer\.ln_f\.bias is stored as I32, which cannot be read; supported dtypes: F32, F16, BF16/,
  });
});
