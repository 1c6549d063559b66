/**
 * The Chorus side of the parity check. For each model: make the seeded checkpoint, build it, then for
 * each prompt record the logits of the prefill's last position and of each teacher-forced cached decode
 * step, and a greedy continuation. Writes <work>/<name>.logits (float32 rows), <name>.json and models.json.
 * Usage: node --import tsx bench/gpu/parity/chorus.ts <work-dir> [name-filter]
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { DecoderSession } from '../../../src/runtime/index.ts';
import { PARITY_MODELS, parityInputs } from './models.ts';

const work = process.argv[2] ?? '/tmp/parity';
const filter = process.argv[3] ?? '';
const listed = [];
for (const model of PARITY_MODELS.filter((m) => m.name.includes(filter))) {
  const started = Date.now();
  const checkpoint = join(work, `${model.arch}-${model.size}-${model.seed}`);
  if (!existsSync(join(checkpoint, 'model.safetensors'))) makeCheckpoint({ arch: model.arch, size: model.size, seed: model.seed, out: checkpoint });
  const built = join(work, model.name);
  buildModel({ source: checkpoint, out: built, dtype: model.dtype, flavor: model.flavor });
  const session = await DecoderSession.open(built, { executionProviders: [model.device] });
  const { prompts, forced } = parityInputs(model, session.vocabSize);
  const rows: Float32Array[] = [];
  const V = session.vocabSize;
  for (let p = 0; p < prompts.length; p++) {
    let out = await session.run({ inputIds: [prompts[p]!] });
    rows.push(out.logits.slice((out.dims[1] - 1) * V, out.dims[1] * V));
    for (const token of forced[p]!) {
      out = await session.run({ inputIds: [[token]], cache: out.cache });
      rows.push(out.logits.slice(0, V));
    }
  }
  const greedy = [];
  for (const prompt of prompts) greedy.push(await session.greedy(prompt, model.greedySteps));
  await session.close();
  const all = new Float32Array(rows.length * V);
  rows.forEach((row, i) => all.set(row, i * V));
  writeFileSync(join(work, `${model.name}.logits`), Buffer.from(all.buffer));
  writeFileSync(join(work, `${model.name}.json`), JSON.stringify({ ...model, checkpoint, vocabSize: V, prompts, forced, greedy }));
  listed.push(model.name);
  process.stdout.write(`chorus ${model.name}: ${rows.length} logit rows, ${prompts.length} greedy runs, ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}
writeFileSync(join(work, 'models.json'), JSON.stringify(listed));
