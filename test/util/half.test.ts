import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fromHalfBits, toHalfBits, widenHalf } from '../../src/util/half.ts';

test('widenHalf gives fromHalfBits of every one of the 65,536 half values, at an offset', () => {
  const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const out = widenHalf(all, new Float32Array(65536 + 3), 3);
  for (let b = 0; b < 65536; b++) {
    const expected = Math.fround(fromHalfBits(b));
    if (Number.isNaN(expected)) assert.ok(Number.isNaN(out[b + 3]!), `bits ${b}`);
    else assert.equal(out[b + 3], expected, `bits ${b}`);
  }
  // And round trips for the finite ones.
  for (const b of [0x0000, 0x0001, 0x03ff, 0x3c00, 0x7bff, 0x8001, 0xc000, 0xfbff]) assert.equal(toHalfBits(out[b + 3]!), b);
});
