import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import type { Tensor } from '../../src/ensemble/index.ts';
import { Service } from '../../src/pipeline/index.ts';
import { DecoderSession, openSessionCount } from '../../src/runtime/index.ts';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';

const REPOSITORY = join(ROOT, 'test/fixtures/repositories/ensembles');
const bytes = (text: string): Tensor => ({ datatype: 'BYTES', shape: [1, 1], data: [text] });
const u32 = (n: number): Tensor => ({ datatype: 'UINT32', shape: [1, 1], data: [n] });
const f32 = (n: number): Tensor => ({ datatype: 'FP32', shape: [1, 1], data: [n] });

describe('ensemble executor', () => {
  let service: Service;
  before(() => {
    service = Service.open(REPOSITORY, { log: () => {} });
  });
  after(async () => {
    await service.close();
  });

  test('tensors wired by name through tokenize -> generate -> detokenize give the greedy story', async () => {
    const out = await lastValueFrom(service.ensemble('stories').run({ prompt: bytes(''), length: u32(60), temperature: f32(0) }));
    const session = await DecoderSession.open((await service.store.model('stories')).dir);
    const ids = await session.greedy([1], 60);
    await session.close();
    const tokenizer = Llama2cTokenizer.load(`${STORIES}/tok512.bin`);
    assert.deepEqual(out.story!.data, [tokenizer.decode(ids)]);
    assert.ok((out.story!.data[0] as string).startsWith('Once upon a time, there was a little girl named Lily.'));
    assert.deepEqual(out.sequence_length!.data, [61]);
    assert.deepEqual(out.finish_reason!.data, ['length']);
  });

  test('streaming: text snapshots grow as tokens come, and their deltas join to the non-streamed text', async () => {
    const inputs = { prompt: bytes('Once upon a time'), length: u32(40), temperature: f32(0) };
    const snapshots = await lastValueFrom(service.ensemble('stories').run(inputs).pipe(toArray()));
    const texts = snapshots.flatMap((s) => (s.story === undefined ? [] : [s.story.data[0] as string]));
    assert.ok(new Set(texts).size > 20, `${new Set(texts).size} distinct text snapshots`);
    let joined = '';
    for (const text of texts) {
      assert.ok(text.startsWith(joined), 'each snapshot extends the one before');
      joined += text.slice(joined.length);
    }
    const final = await lastValueFrom(service.ensemble('stories').run(inputs));
    assert.equal(joined, final.story!.data[0]);
  });

  test('a diamond: one tensor feeds two steps that meet in a third (script steps)', async () => {
    const text = 'Once upon a time';
    const n = Llama2cTokenizer.load(`${STORIES}/tok512.bin`).encode(text).length;
    const out = await lastValueFrom(service.ensemble('diamond').run({ text: bytes(text) }));
    assert.deepEqual(out.total, { datatype: 'INT32', shape: [1, 1], data: [3 * n] });
    // The optional input, given this time, reaches the script; left out above, it did not.
    const withBonus = await lastValueFrom(service.ensemble('diamond').run({ text: bytes(text), bonus: { datatype: 'INT32', shape: [1, 1], data: [100] } }));
    assert.deepEqual(withBonus.total!.data, [3 * n + 100]);
  });

  test('errors carry the failing step\'s name', async () => {
    await assert.rejects(lastValueFrom(service.ensemble('broken').run({ text: bytes('x') })), { code: 'CHORUS_INTERNAL', step: 'boom', message: 'step boom: the script failed on purpose' });
    await assert.rejects(lastValueFrom(service.ensemble('stories').run({ prompt: bytes(''), length: u32(100000) })), { code: 'CHORUS_CANNOT_FIT', step: 'gen', message: /^step gen: request_output_len \(max_tokens\) 100000 is more than the 511 tokens model stories has room for after a prompt of 1$/ });
    await assert.rejects(lastValueFrom(service.ensemble('stories').run({ prompt: bytes(''), length: u32(5), temperature: f32(-1) })), { step: 'gen', message: 'step gen: temperature must be a number in [0, inf), got -1' });
  });

  test('bad inputs are refused before any step runs, naming the input', async () => {
    const run = (inputs: Record<string, Tensor>): Promise<unknown> => lastValueFrom(service.ensemble('stories').run(inputs));
    await assert.rejects(run({ prompt: bytes('') }), { message: 'input length is required by ensemble stories' });
    await assert.rejects(run({ prompt: bytes(''), length: f32(3) }), { message: 'input length must be UINT32, got FP32' });
    await assert.rejects(run({ prompt: { datatype: 'BYTES', shape: [1, 2], data: ['a', 'b'] }, length: u32(3) }), { message: 'input prompt must have shape [batch, 1], got [1, 2]' });
    await assert.rejects(run({ prompt: bytes(''), length: u32(3), nope: u32(1) }), { message: 'ensemble stories has no input nope; its inputs are: prompt, length, temperature' });
  });

  test('unsubscribing cancels the generation in the engine', async () => {
    const model = await service.store.model('stories');
    assert.equal(model.engine, 'generate');
    const engine = model.engine === 'generate' ? model.generator : undefined;
    const cancelledBefore = engine!.stats().requestsCancelled;
    await new Promise<void>((resolve) => {
      let seen = 0;
      const subscription = service.ensemble('stories').run({ prompt: bytes(''), length: u32(200), temperature: f32(0.8) }).subscribe((snapshot) => {
        if (snapshot.story !== undefined && ++seen === 10) {
          subscription.unsubscribe();
          resolve();
        }
      });
    });
    while (engine!.stats().running > 0) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(engine!.stats().requestsCancelled, cancelledBefore + 1);
  });

  test('model control: load, unload and reload open and release sessions', async () => {
    await service.store.unload('stories');
    const base = openSessionCount();
    assert.deepEqual(service.store.index(), [{ name: 'stories', state: 'UNAVAILABLE' }]);
    await service.store.load('stories');
    assert.equal(openSessionCount(), base + 1);
    assert.deepEqual(service.store.index(), [{ name: 'stories', state: 'READY' }]);
    await service.store.reload('stories');
    assert.equal(openSessionCount(), base + 1);
    await service.store.unload('stories');
    assert.equal(openSessionCount(), base);
    await assert.rejects(service.store.unload('nope'), { code: 'CHORUS_NOT_FOUND', message: 'no model named nope; there are: stories' });
    // A request after unloading loads the model again.
    const out = await lastValueFrom(service.ensemble('stories').run({ prompt: bytes(''), length: u32(3), temperature: f32(0) }));
    assert.equal(out.sequence_length!.data[0], 4);
    assert.equal(openSessionCount(), base + 1);
  });
});
