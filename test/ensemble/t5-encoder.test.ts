/**
 * FT's T5 encoder: the bundled text-in and ids-in ensembles agree, and attentions come when a request
 * asks with is_return_attentions, from a model built to offer them (t5-small's shape on seeded random
 * weights, offline).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom } from 'rxjs';
import type { Tensor } from '../../src/ensemble/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { bundledRepositoryDir, parseSourceOverride } from '../../src/repository/index.ts';
import { tinyFtRepository } from '../helpers/ft-repository.ts';
import { SHARED } from '../helpers/paths.ts';

process.env.HF_HUB_OFFLINE = '1';
const TEXT = 'translate English to German: The house is wonderful.';
const u32 = (values: number[]): Tensor => ({ datatype: 'UINT32', shape: [1, values.length], data: values });
const bool = (value: boolean): Tensor => ({ datatype: 'BOOL', shape: [1, 1], data: [value] });

describe('the T5 encoder ensembles', () => {
  let service: Service;
  before(() => {
    service = Service.open(bundledRepositoryDir(), { sourceOverrides: [parseSourceOverride(`t5=${SHARED}/tokenizers/t5`)], log: () => {} });
  });
  after(async () => {
    await service.close();
  });

  test('ids in (input_ids, sequence_length) give the hidden states text in gives', async () => {
    const ids = (await service.store.tokenizer('t5')).encode(TEXT);
    const fromText = await lastValueFrom(service.ensemble('t5-encoder').run({ text: { datatype: 'BYTES', shape: [1, 1], data: [TEXT] } }));
    const fromIds = await lastValueFrom(service.ensemble('t5-encoder-fastertransformer').run({ input_ids: u32(ids), sequence_length: u32([ids.length]) }));
    assert.deepEqual(fromIds.output_hidden_state!.shape, [1, ids.length, 512]);
    assert.deepEqual(fromIds.output_hidden_state!.data, fromText.output_hidden_state!.data);
    assert.equal(fromIds.output_attentions, undefined, 'no attentions unless asked');
  });

  test('is_return_attentions returns each layer\'s attention probabilities, padding masked', async () => {
    const ids = (await service.store.tokenizer('t5')).encode(TEXT);
    const padded: Tensor = { datatype: 'UINT32', shape: [1, ids.length + 2], data: [...ids, 0, 0] };
    const out = await lastValueFrom(service.ensemble('t5-encoder-fastertransformer').run({ input_ids: padded, sequence_length: u32([ids.length]), is_return_attentions: bool(true) }));
    const L = ids.length + 2;
    assert.deepEqual(out.output_attentions!.shape, [1, 6, 8, L, L]);
    const data = out.output_attentions!.data as number[];
    for (let row = 0; row < 6 * 8 * L; row += 7) {
      const probs = data.slice(row * L, (row + 1) * L);
      assert.ok(Math.abs(probs.reduce((a, b) => a + b, 0) - 1) < 1e-4, `row ${row} sums to 1`);
      assert.ok(probs[L - 1]! < 1e-6 && probs[L - 2]! < 1e-6, `row ${row} gives padding no weight`);
    }
    const off = await lastValueFrom(service.ensemble('t5-encoder').run({ text: { datatype: 'BYTES', shape: [1, 1], data: [TEXT] }, is_return_attentions: bool(false) }));
    assert.equal(off.output_attentions, undefined);
  });
});

test('asking a model built without attentions for them is refused, saying how to offer them', async () => {
  const service = Service.open(tinyFtRepository(), { log: () => {} });
  try {
    await assert.rejects(lastValueFrom(service.ensemble('t5-encoder-fastertransformer').run({ input_ids: u32([5, 6, 7]), sequence_length: u32([3]), is_return_attentions: bool(true) })), {
      message: 'step fastertransformer: model t5-encoder was not built to return attentions; set output_attentions: true in its definition to offer them',
    });
  } finally {
    await service.close();
  }
});
