/**
 * The Chorus side of the parity check. For each model: make the seeded checkpoint, build it, then for
 * each prompt record the logits of the prefill's last position and of each teacher-forced cached decode
 * step, and a greedy continuation. Writes <work>/<name>.logits (float32 rows), <name>.json and models.json.
 * Decoder-only models of the cuda flavor and encoder-decoders on CUDA also run through the engines (when
 * the native addon is built): the native engine's greedy continuations (CUDA graphs on) and beam-4
 * results beside the TypeScript engine's (OrtEngine or Seq2SeqEngine on CUDA), all prompts submitted
 * together, and 64 mixed streams against each alone.
 * Usage: node --import tsx bench/gpu/parity/chorus.ts <work-dir> [name-regexp]
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, OrtEngine, Seq2SeqEngine, type Engine, type SamplingParams } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { loadNative } from '../../../src/native/index.ts';
import { relativeBucketTable } from '../../../src/modelbuild/relative-position.ts';
import { DecoderSession, Seq2SeqSession, argmax } from '../../../src/runtime/index.ts';
import { mixedStreams, PARITY_MODELS, SEQ2SEQ_ARCHS, parityInputs, type ParityModel } from './models.ts';

/** Each prompt's tokens from an engine (all submitted together); beams give their best sequence. */
async function engineIds(engine: Engine, prompts: number[][], params: SamplingParams): Promise<number[][]> {
  const runs = await Promise.all(prompts.map((inputIds) => lastValueFrom(engine.submit({ inputIds, params }).pipe(toArray()))));
  return runs.map((events) => events.filter((e) => (e.sequence ?? 0) === 0).map((e) => e.token));
}

/** The native engine's greedy and beam-4 ids beside the TypeScript engine's, on CUDA. */
async function engineRuns(built: string, prompts: number[][], greedySteps: number, seq2seq: boolean): Promise<Record<string, number[][]>> {
  const greedy = { temperature: 0, request_output_len: greedySteps };
  const beam = { beam_width: 4, request_output_len: 32 };
  const native = await NativeEngine.open(built, { provider: 'cuda', maxBatchSize: 32, cudaGraph: true, slotLength: 128, ...(seq2seq ? { sourceLength: 64 } : {}) });
  const ts = seq2seq
    ? await Seq2SeqEngine.open(built, { executionProviders: ['cuda'], maxBatchSize: 32 })
    : await OrtEngine.open(built, { executionProviders: ['cuda'], maxBatchSize: 32, greedySearch: false });
  try {
    return {
      greedyNative: await engineIds(native, prompts, greedy),
      greedyEngine: await engineIds(ts, prompts, greedy),
      beamNative: await engineIds(native, prompts, beam),
      beamEngine: await engineIds(ts, prompts, beam),
      ...(await mixedStreams(native, prompts)),
      ...(await invariantStreams(built, prompts, seq2seq)),
    };
  } finally {
    await native.close();
    await ts.close();
  }
}

/** The 64 mixed streams again on a batch-invariant native engine (every step padded to its 32 slots). */
async function invariantStreams(built: string, prompts: number[][], seq2seq: boolean): Promise<{ streamsAloneInvariant: number[][]; streamsTogetherInvariant: number[][] }> {
  const engine = await NativeEngine.open(built, { provider: 'cuda', maxBatchSize: 32, cudaGraph: true, batchInvariant: true, slotLength: 128, ...(seq2seq ? { sourceLength: 64 } : {}) });
  try {
    const { streamsAlone, streamsTogether } = await mixedStreams(engine, prompts);
    return { streamsAloneInvariant: streamsAlone, streamsTogetherInvariant: streamsTogether };
  } finally {
    await engine.close();
  }
}

/**
 * Takes forced_bos_token_id and forced_eos_token_id out of a built encoder-decoder's configs, so that the
 * engines' greedy ids are the raw argmax, as transformers' stepwise greedy here takes them.
 */
function withoutForcedTokens(built: string): void {
  for (const file of ['config.json', 'generation_config.json']) {
    const config = JSON.parse(readFileSync(join(built, file), 'utf8')) as Record<string, unknown>;
    delete config.forced_bos_token_id;
    delete config.forced_eos_token_id;
    writeFileSync(join(built, file), JSON.stringify(config, null, 2));
  }
}

/** Logit rows and greedy ids of an encoder-decoder; with task encode, hidden states instead of logits. */
async function runSeq2Seq(model: ParityModel, built: string): Promise<{ rows: Float32Array[]; greedy: number[][]; prompts: number[][]; forced: number[][]; vocabSize: number }> {
  const session = await Seq2SeqSession.open(built, { executionProviders: [model.device] });
  const vocabSize = model.task === 'encode' ? 0 : session.vocabSize;
  const { prompts, forced } = parityInputs(model, model.task === 'encode' ? 512 : vocabSize);
  const rows: Float32Array[] = [];
  const greedy: number[][] = [];
  const start = Number(session.config.decoder_start_token_id ?? 0);
  for (let p = 0; p < prompts.length; p++) {
    const encoded = await session.encode([prompts[p]!]);
    if (model.task === 'encode') {
      rows.push(Float32Array.from(encoded.hidden.data as Float32Array));
      continue;
    }
    let out = await session.step(encoded, [[start]]);
    rows.push(out.logits.slice(0, vocabSize));
    for (const token of forced[p]!) {
      out = await session.step(encoded, [[token]], out.cache);
      rows.push(out.logits.slice(0, vocabSize));
    }
    const ids: number[] = [];
    out = await session.step(encoded, [[start]]);
    for (let i = 0; i < model.greedySteps; i++) {
      const next = argmax(out.logits, 0, vocabSize);
      ids.push(next);
      if (i + 1 < model.greedySteps) out = await session.step(encoded, [[next]], out.cache);
    }
    greedy.push(ids);
  }
  await session.close();
  return { rows, greedy, prompts, forced, vocabSize };
}

const work = process.argv[2] ?? '/tmp/parity';
const filter = process.argv[3] ?? '';
const listed = [];
for (const model of PARITY_MODELS.filter((m) => new RegExp(filter).test(m.name))) {
  const started = Date.now();
  const checkpoint = join(work, `${model.arch}-${model.size}-${model.seed}`);
  if (!existsSync(join(checkpoint, 'model.safetensors'))) makeCheckpoint({ arch: model.arch, size: model.size, seed: model.seed, out: checkpoint });
  const built = join(work, model.name);
  const seq2seq = SEQ2SEQ_ARCHS.includes(model.arch);
  const engines = model.device === 'cuda' && (model.flavor === 'cuda' || seq2seq) && model.task !== 'encode' && loadNative().addon?.cuda === true;
  buildModel({ source: checkpoint, out: built, dtype: model.dtype, flavor: model.flavor, task: model.task ?? 'generate', slotDecoder: engines });
  if (seq2seq) {
    const { rows, greedy, prompts, forced, vocabSize } = await runSeq2Seq(model, built);
    if (engines) withoutForcedTokens(built);
    const fromEngines = engines ? await engineRuns(built, prompts, model.greedySteps, true) : {};
    writeFileSync(join(work, `${model.name}.logits`), Buffer.concat(rows.map((row) => Buffer.from(row.buffer, row.byteOffset, row.byteLength))));
    writeFileSync(join(work, `${model.name}.json`), JSON.stringify({ ...model, kind: 'seq2seq', checkpoint, vocabSize, prompts, forced, greedy, ...fromEngines }));
    listed.push(model.name);
    process.stdout.write(`chorus ${model.name}: ${rows.length} rows, ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    continue;
  }
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
  const fromEngines = engines ? await engineRuns(built, prompts, model.greedySteps, false) : {};
  const all = new Float32Array(rows.length * V);
  rows.forEach((row, i) => all.set(row, i * V));
  writeFileSync(join(work, `${model.name}.logits`), Buffer.from(all.buffer));
  writeFileSync(join(work, `${model.name}.json`), JSON.stringify({ ...model, kind: 'decoder', checkpoint, vocabSize: V, prompts, forced, greedy, ...fromEngines }));
  listed.push(model.name);
  process.stdout.write(`chorus ${model.name}: ${rows.length} logit rows, ${prompts.length} greedy runs, ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}
writeFileSync(join(work, 'models.json'), JSON.stringify(listed));
// T5's relative position buckets as Chorus tabulates them, for hf.py to check against transformers.
writeFileSync(join(work, 'relative-buckets.json'), JSON.stringify({ bidirectional: relativeBucketTable(true, 32, 128), causal: relativeBucketTable(false, 32, 128), maxDistance: 128 }));
