import assert from 'node:assert/strict';
import { test } from 'node:test';
import { convertRaw, decodeRaw, encodeFloats, transposeRaw } from '../../src/modelbuild/float-bits.ts';
import { fromBfloat16Bits, fromHalfBits, toHalfBits } from '../../src/util/half.ts';

const every16 = Uint16Array.from({ length: 65536 }, (_, i) => i);
const bytes = (words: Uint16Array): Uint8Array => new Uint8Array(words.buffer);
const words = (raw: Uint8Array): Uint16Array => new Uint16Array(new Uint8Array(raw).buffer);

test('every bf16 and fp16 value widens exactly; every bf16 value narrows to fp16 as toHalfBits rounds it', () => {
  const bf16 = decodeRaw(bytes(every16), 'BF16');
  const f16 = decodeRaw(bytes(every16), 'F16');
  const half = words(convertRaw(bytes(every16), 'BF16', 'float16'));
  for (let i = 0; i < 65536; i++) {
    const [b, h] = [fromBfloat16Bits(i), fromHalfBits(i)];
    if (Number.isNaN(b)) assert.ok(Number.isNaN(bf16[i]!) && (half[i]! & 0x7c00) === 0x7c00 && (half[i]! & 0x3ff) !== 0, `bf16 ${i}`);
    else {
      assert.equal(bf16[i], b, `bf16 ${i}`);
      assert.equal(half[i], toHalfBits(b), `bf16 ${i} to fp16`);
    }
    if (!Number.isNaN(h)) assert.equal(f16[i], h, `fp16 ${i}`);
  }
});

test('float32 narrows to bf16 to nearest even, with NaN kept quiet and the largest values kept finite or infinite as they round', () => {
  const values = Float32Array.of(1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5, Infinity, -Infinity, 3.3895313892515355e38, 3.4028234663852886e38, 0, -0, NaN);
  assert.deepEqual(Array.from(words(encodeFloats(values, 'bfloat16'))), [0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0xff80, 0x7f7f, 0x7f80, 0x0000, 0x8000, 0x7fc0]);
  // A bf16 value goes through float32 and back unchanged.
  const finite = every16.filter((b) => !Number.isNaN(fromBfloat16Bits(b)));
  assert.deepEqual(words(encodeFloats(decodeRaw(bytes(finite), 'BF16'), 'bfloat16')), finite);
});

test('transposeRaw moves 2- and 4-byte elements of any shape, across its blocks', () => {
  for (const [rows, cols] of [[3, 5], [70, 130], [1, 9]] as const) {
    const src = Uint32Array.from({ length: rows * cols }, (_, i) => i * 7 + 1);
    const out = new Uint32Array(new Uint8Array(transposeRaw(new Uint8Array(src.buffer), rows, cols, 4)).buffer);
    const half = words(transposeRaw(bytes(Uint16Array.from(src)), rows, cols, 2));
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        assert.equal(out[c * rows + r], src[r * cols + c]);
        assert.equal(half[c * rows + r], src[r * cols + c]! & 0xffff);
      }
    }
  }
});
