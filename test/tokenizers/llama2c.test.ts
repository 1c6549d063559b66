import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';
import { STORIES } from '../helpers/paths.ts';

const file = readFileSync(`${STORIES}/tok512.bin`);

/** llama2.c's `encode`, written as plainly as its C: scan every pair each round, merge the best. */
function referenceEncode(text: string): number[] {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const vocab: string[] = [];
  const scores: number[] = [];
  for (let offset = 4; offset < file.byteLength; ) {
    scores.push(view.getFloat32(offset, true));
    const length = view.getInt32(offset + 4, true);
    vocab.push(file.subarray(offset + 8, offset + 8 + length).toString('latin1'));
    offset += 8 + length;
  }
  const lookup = (s: string): number => vocab.indexOf(s);
  const tokens = [1];
  if (text !== '') tokens.push(lookup(' '));
  for (const ch of text) {
    const bytes = Buffer.from(ch, 'utf8').toString('latin1');
    const id = lookup(bytes);
    if (id >= 0) tokens.push(id);
    else for (const b of bytes) tokens.push(b.charCodeAt(0) + 3);
  }
  for (;;) {
    let best = -1e10;
    let bestId = -1;
    let bestIndex = -1;
    for (let i = 0; i + 1 < tokens.length; i++) {
      const id = lookup(vocab[tokens[i]!]! + vocab[tokens[i + 1]!]!);
      if (id !== -1 && scores[id]! > best) {
        best = scores[id]!;
        bestId = id;
        bestIndex = i;
      }
    }
    if (bestIndex === -1) break;
    tokens.splice(bestIndex, 2, bestId);
  }
  return tokens;
}

test('Llama2cTokenizer.encode() matches llama2.c\'s quadratic merge loop on random text', () => {
  const tokenizer = new Llama2cTokenizer(file);
  const alphabet = fc.constantFrom(...'aeiou tnshrdlcmwfgypbvk.,!?\'"\nTHOé你😀'.split(''), 'the', ' and', 'ing', ' was', 'Once');
  fc.assert(
    fc.property(fc.array(alphabet, { maxLength: 40 }), (parts) => {
      const text = parts.join('');
      assert.deepEqual(tokenizer.encode(text), referenceEncode(text));
    }),
    { seed: 7, numRuns: 300 },
  );
});

test('Llama2cTokenizer refuses a file that is not a tokenizer.bin, saying why', () => {
  assert.throws(() => new Llama2cTokenizer(Uint8Array.from([1, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0, 0])), {
    code: 'CHORUS_FILE_INVALID',
    message: /not a llama2\.c tokenizer\.bin: entry 0 has length 200 past the end/,
  });
});
