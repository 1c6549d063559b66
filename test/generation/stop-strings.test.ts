import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { StopStringMatcher } from '../../src/generation/core/index.ts';

function run(stops: string[], deltas: string[]): { text: string; stopped: boolean } {
  const matcher = new StopStringMatcher(stops);
  let text = '';
  for (const delta of deltas) {
    const out = matcher.push(delta);
    text += out.text;
    if (out.stopped) return { text, stopped: true };
  }
  return { text: text + matcher.flush(), stopped: false };
}

test('a stop string split across deltas is found, and nothing after it is emitted', () => {
  assert.deepEqual(run(['\n\nUser:'], ['Hello', ' there.\n', '\nUs', 'er: more']), { text: 'Hello there.', stopped: true });
});

test('held-back text that does not become a stop string is released', () => {
  const matcher = new StopStringMatcher(['STOP']);
  assert.deepEqual(matcher.push('go ST'), { text: 'go ', stopped: false });
  assert.deepEqual(matcher.push('AR'), { text: 'STAR', stopped: false });
  assert.equal(matcher.flush(), '');
});

test('for any text and any split, the output is the text up to the first stop string', () => {
  fc.assert(
    fc.property(fc.string({ unit: fc.constantFrom('a', 'b', 'c', ' ', '\n') }), fc.array(fc.nat(), { maxLength: 8 }), (text, cuts) => {
      const stops = ['ab c', '\n\n', 'cc'];
      const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((x, y) => x - y);
      const deltas = [...points, text.length].map((end, i, all) => text.slice(i === 0 ? 0 : all[i - 1], end));
      const firsts = stops.map((s) => text.indexOf(s)).filter((i) => i >= 0);
      const expected = firsts.length > 0 ? { text: text.slice(0, Math.min(...firsts)), stopped: true } : { text, stopped: false };
      assert.deepEqual(run(stops, deltas), expected);
    }),
    { seed: 5, numRuns: 500 },
  );
});
