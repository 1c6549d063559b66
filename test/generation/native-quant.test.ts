import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine } from '../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { modelMemoryLines } from '../../src/cli/doctor-model.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-native-quant-');
const prompt = [5, 17, 99, 200, 31, 8];

/** Greedy ids of the merged decoder (ONNX Runtime directly), the reference for the native engine. */
async function mergedGreedy(dir: string, steps: number): Promise<number[]> {
  const session = await DecoderSession.open(dir);
  const V = session.vocabSize;
  let out = await session.run({ inputIds: [prompt], lastOnly: true });
  const ids: number[] = [];
  for (let i = 0; i < steps; i++) {
    const row = out.logits.subarray(out.logits.length - V);
    const next = row.indexOf(Math.max(...row));
    ids.push(next);
    out = await session.run({ inputIds: [[next]], cache: out.cache });
  }
  await session.close();
  return ids;
}

test('the native engine runs an int4 build (slots and paged) as the merged decoder does, and logs the memory split', { skip }, async () => {
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 21, out: join(root, 'ckpt') });
  const dir = join(root, 'int4');
  buildModel({ source: join(root, 'ckpt'), out: dir, flavor: 'cuda', slotDecoder: true, weights: 'int4', groupSize: 32 });
  const expected = await mergedGreedy(dir, 12);
  for (const pagedCache of [false, true]) {
    const lines: string[] = [];
    const engine = await NativeEngine.open(dir, { maxBatchSize: 2, slotLength: 64, pagedCache, log: (line) => void lines.push(line) });
    const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 12, min_length: 12 } }).pipe(toArray()));
    await engine.close();
    assert.deepEqual(events.map((e) => e.token), expected, pagedCache ? 'paged' : 'slots');
    assert.match(lines.join('\n'), /cache: .*; weights [\d.]+ GiB \(int4 projections, fp32 activations\)/);
  }
  const [line] = modelMemoryLines(dir, undefined);
  assert.match(line!, /weights [\d.]+ [KM]B \(int4 projections \(groups of 32\), LM head fp32, fp32 activations\); key\/value cache 0\.5 KiB a token/);
});

test('an int8 build runs its projections through the addon\'s QuantLinear in the slot decoders, as the merged decoder decodes', { skip }, async () => {
  makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 22, out: join(root, 'ckpt8') });
  const dir = join(root, 'int8');
  buildModel({ source: join(root, 'ckpt8'), out: dir, flavor: 'cuda', slotDecoder: true, slotLinear: 'addon', weights: 'int8' });
  // The addon's Linear is the default of 16-bit builds; this fp32 one asks for it.
  for (const file of ['decoder_model_slots.onnx', 'decoder_model_paged.onnx']) {
    const graph = readFileSync(join(dir, 'onnx', file)).toString('latin1');
    assert.ok(graph.includes('QuantLinear') && !graph.includes('MatMulNBits'), `${file}: QuantLinear, not MatMulNBits`);
  }
  // Both the merged decoder's MatMulNBits and QuantLinear take int8 activations on the CPU, each row
  // quantized per block, so the two decodings agree.
  const expected = await mergedGreedy(dir, 12);
  const ids: number[][] = [];
  for (const pagedCache of [false, true]) {
    const engine = await NativeEngine.open(dir, { maxBatchSize: 2, slotLength: 64, pagedCache });
    const events = await lastValueFrom(engine.submit({ inputIds: prompt, params: { temperature: 0, request_output_len: 12, min_length: 12 } }).pipe(toArray()));
    await engine.close();
    ids.push(events.map((e) => e.token));
  }
  assert.deepEqual(ids[1], ids[0], 'paged as slots');
  assert.deepEqual(ids[0], expected);
});
