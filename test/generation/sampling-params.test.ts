import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateSamplingParams } from '../../src/generation/core/index.ts';

test('validateSamplingParams() fills defaults', () => {
  const p = validateSamplingParams({}, 100);
  assert.deepEqual([p.request_output_len, p.runtime_top_k, p.runtime_top_p, p.temperature, p.beam_width, p.num_return_sequences], [16, 0, 1, 1, 1, 1]);
});

test('validateSamplingParams() refuses bad values, naming the field and the allowed range', () => {
  const cases: Array<[object, string]> = [
    [{ runtime_top_p: 1.5 }, 'runtime_top_p must be a number in (0, 1], got 1.5'],
    [{ temperature: -0.5 }, 'temperature must be a number in [0, inf), got -0.5'],
    [{ beam_width: 0 }, 'beam_width must be an integer in [1, 64], got 0'],
    [{ runtime_top_k: 2.5 }, 'runtime_top_k must be an integer in [0, 100], got 2.5'],
    [{ bad_words: [[1, 100]] }, 'bad_words[0][1] must be a token id, an integer in [0, 99], got 100'],
    [{ top_p_reset_ids: [-1] }, 'top_p_reset_ids[0] must be a token id, an integer in [0, 99], got -1'],
    [{ end_id: 100 }, 'end_id must be a token id, an integer in [0, 99], got 100'],
    [{ num_return_sequences: 3, beam_width: 2 }, 'num_return_sequences must be an integer in [1, 2] (at most beam_width, 2), got 3'],
    [{ top_p_decay: 0 }, 'top_p_decay must be a number in (0, 1], got 0'],
    [{ request_output_len: 0 }, 'request_output_len must be an integer in [1, 2^53], got 0'],
  ];
  for (const [params, message] of cases) assert.throws(() => validateSamplingParams(params, 100), { code: 'CHORUS_INVALID_ARGUMENT', message });
});
