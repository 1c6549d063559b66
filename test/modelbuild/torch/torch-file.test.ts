import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileRanges } from '../../../src/modelbuild/file-range.ts';
import { readStateDict } from '../../../src/modelbuild/torch/state-dict.ts';
import { readTorchFile } from '../../../src/modelbuild/torch/torch-file.ts';
import { f32, tensorPy, torchSave, torchZip, pickle, type Py } from '../../helpers/pickle-writer.ts';
import { scratchDir } from '../../helpers/scratch.ts';

const root = scratchDir('chorus-torch-file-');
const FIXTURE = new URL('../../fixtures/checkpoints/gpt2/bin/pytorch_model.bin', import.meta.url).pathname;

const halfBits = (values: number[]): Uint8Array => new Uint8Array(Uint16Array.from(values).buffer);

test('views of one storage read their own values: offsets, a transposed stride, float16 and bfloat16 storages', () => {
  const file = join(root, 'views.pt');
  // Storage 0: 0..11 as float32. a = rows 1..2 of a [4, 3] view; t = the [3, 4] transpose of the whole (strides [1, 3]).
  const storage = f32(Array.from({ length: 12 }, (_, i) => i));
  torchSave(
    file,
    new Map<Py, Py>([
      ['a', tensorPy('0', 'FloatStorage', 12, 3, [2, 3], [3, 1])],
      ['t', tensorPy('0', 'FloatStorage', 12, 0, [3, 4], [1, 3])],
      ['h', tensorPy('1', 'HalfStorage', 2, 0, [2], [1])],
      ['b', tensorPy('2', 'BFloat16Storage', 2, 1, [1], [1])],
    ]),
    new Map([['0', storage], ['1', halfBits([0x3c00, 0xc000])], ['2', halfBits([0x3f80, 0x4040])]]),
  );
  const sd = readStateDict(file);
  assert.deepEqual(Array.from(sd.get('a')!.data), [3, 4, 5, 6, 7, 8]);
  assert.deepEqual(Array.from(sd.get('t')!.data), [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
  assert.deepEqual(Array.from(sd.get('t')!.read!(5, 4)), [4, 7, 10, 2]);
  assert.equal(sd.get('h')!.dtype, 'F16');
  assert.deepEqual(Array.from(sd.get('h')!.data), [1, -2]);
  assert.equal(sd.get('b')!.dtype, 'BF16');
  assert.deepEqual(Array.from(sd.get('b')!.data), [3]);
});

test('an archive whose sizes and offsets are in ZIP64 fields (as past 4 GiB) reads the same', () => {
  const file = join(root, 'zip64.pt');
  const value = pickle(new Map<Py, Py>([['w', tensorPy('0', 'FloatStorage', 3, 1, [2], [1])]]));
  writeFileSync(file, torchZip(value, new Map([['0', f32([1, 2, 3])]]), 'big', true));
  assert.deepEqual(Array.from(readStateDict(file).get('w')!.data), [2, 3]);
});

test('a state dict nested under "model" beside other values is found; a file without one is refused listing its keys', () => {
  const storages = new Map([['0', f32([1, 2])]]);
  const file = join(root, 'nested.pt');
  torchSave(file, new Map<Py, Py>([['model', new Map<Py, Py>([['w', tensorPy('0', 'FloatStorage', 2, 0, [2], [1])]])], ['epoch', 3]]), storages);
  assert.deepEqual([...readStateDict(file).keys()], ['w']);
  const none = join(root, 'none.pt');
  torchSave(none, new Map<Py, Py>([['epoch', 3], ['lr', { float: 0.1 }]]), storages);
  assert.throws(() => readStateDict(none), /none\.pt holds no state dict: its dict has epoch, lr; expected tensors by name, or one of state_dict, model, module, model_state_dict holding them/);
});

test('a tensor reaching past its storage, or a storage entry shorter than its elements, is refused', () => {
  const past = join(root, 'past.pt');
  torchSave(past, new Map<Py, Py>([['w', tensorPy('0', 'FloatStorage', 4, 2, [3], [1])]]), new Map([['0', f32([1, 2, 3, 4])]]));
  assert.throws(() => readStateDict(past), /past\.pt: a tensor of shape \[3\] reaches element 4 of storage 0, which holds 4/);
  const short = join(root, 'short.pt');
  torchSave(short, new Map<Py, Py>([['w', tensorPy('0', 'FloatStorage', 4, 0, [4], [1])]]), new Map([['0', f32([1, 2])]]));
  assert.throws(() => readStateDict(short), /storage 0 holds 8 bytes, its tensors need 16/);
});

test('a truncated archive is refused as truncated, whether its directory or a storage is cut', () => {
  const whole = readFileSync(FIXTURE);
  const tail = join(root, 'tail.bin');
  writeFileSync(tail, whole.subarray(0, whole.length - 10));
  assert.throws(() => readStateDict(tail), /tail\.bin is not a readable PyTorch checkpoint: no end-of-central-directory record: the file is truncated, or not a zip archive written by torch\.save/);
  // Keep the directory, cut the data before it: the entries now point past the end.
  const storages = new Map([['0', f32(Array.from({ length: 64 }, (_, i) => i))]]);
  const zip = torchZip(pickle(new Map<Py, Py>([['w', tensorPy('0', 'FloatStorage', 64, 0, [64], [1])]])), storages);
  const directoryAt = zip.readUInt32LE(zip.length - 6);
  const cut = Buffer.concat([zip.subarray(0, directoryAt - 200), zip.subarray(directoryAt)]);
  cut.writeUInt32LE(directoryAt - 200, cut.length - 6);
  const inner = join(root, 'inner.bin');
  writeFileSync(inner, cut);
  assert.throws(() => readStateDict(inner), /inner\.bin is not a readable PyTorch checkpoint: archive\/data\/0 runs into the central directory that follows the entries: the file is truncated or damaged/);
});

test('a damaged pickle fails its CRC check; a file that is neither zip nor pickle is refused', () => {
  const bytes = Buffer.from(readFileSync(FIXTURE));
  const at = bytes.indexOf('data.pkl') + 'data.pkl'.length + 40; // inside the pickle's bytes
  bytes[at] = bytes[at]! ^ 0xff;
  const damaged = join(root, 'damaged.bin');
  writeFileSync(damaged, bytes);
  assert.throws(() => readTorchFile(fileRanges(damaged), damaged), /damaged\.bin is not a readable PyTorch checkpoint: pytorch_model\/data\.pkl fails its CRC-32 check: the file is damaged/);
  const text = join(root, 'text.bin');
  writeFileSync(text, 'version https://git-lfs.github.com/spec/v1\n');
  assert.throws(() => readTorchFile(fileRanges(text), text), /text\.bin is not a readable PyTorch checkpoint: it is neither a zip archive/);
});
