import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bytesText, percentSteps } from '../../src/modelbuild/index.ts';

test('build progress is logged once per 10% of the weights, and sizes read as the hub writes them', () => {
  const lines: string[] = [];
  const progress = percentSteps((percent, done, total) => lines.push(`${percent}% ${bytesText(done)} of ${bytesText(total)}`));
  const total = 13_476_839_424;
  for (let done = 0; done <= total; done += 250_000_000) progress(done, total);
  progress(total, total);
  assert.deepEqual(lines, ['10% 1.5 GB of 13.5 GB', '20% 2.8 GB of 13.5 GB', '30% 4.3 GB of 13.5 GB', '40% 5.5 GB of 13.5 GB', '50% 6.8 GB of 13.5 GB', '60% 8.3 GB of 13.5 GB', '70% 9.5 GB of 13.5 GB', '80% 11.0 GB of 13.5 GB', '90% 12.3 GB of 13.5 GB', '100% 13.5 GB of 13.5 GB']);
  assert.deepEqual([bytesText(512), bytesText(1500), bytesText(2_200_119_664)], ['512 B', '1.5 KB', '2.2 GB']);
});
