/**
 * One measured batch on the native engine, for the kernel tracer (run.sh): the model's batch is run
 * twice to warm up (graphs captured, ONNX Runtime's memory sized), then, after 500 ms with the GPU
 * idle, once more; the idle gap marks where the measured run starts in the trace.
 *   gpt2: GPT-2 124M fp16 (cuda flavor), prompt 128, 128 new tokens;
 *   t5-small, t5-base, bart-large: fp16, source 256, 64 new tokens, min_length 64 (no early stop);
 *   a checkpoint folder (a path, decoder-only): built fp16 (bf16 with the flag bf16), as gpt2.
 * Engine flags: one-step (greedySteps 1), no-graph (cudaGraph off), invariant (batch-invariant);
 * gqa: the slot decoder built with GroupQueryAttention rather than the addon's attention;
 * pa: built with `--slot-attention PagedAttention`;
 * int8, int4: built with `--weights int8` or `int4` (a checkpoint folder's model);
 * streams: the requests streamed and arriving 2 ms apart (as the speed runs' concurrent streams);
 * sampled: temperature 0.7, top_p 0.9 and a seed a request (as `chorus bench` samples);
 * core: on the continuous core (as `chorus serve` runs a GPU model).
 * Usage: node --import tsx bench/gpu/profile/steps.ts <work-dir> <model> <batch> [greedy|beam4] [flag...] <out.json>
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { lastValueFrom, toArray } from 'rxjs';
import { NativeEngine, type SamplingParams } from '../../../src/generation/index.ts';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { SEQ2SEQ_MODELS, seededRows } from '../speed/common.ts';

const args = process.argv.slice(2);
const [work = '/tmp/profile', model = 'gpt2', batchArg = '1'] = args;
const out = args[args.length - 1]!;
const flags = args.slice(3, -1);
const batch = Number(batchArg);
const beam = flags.includes('beam4');
const folder = model.includes('/');
const seq2seq = model !== 'gpt2' && !folder;
const dtype = flags.includes('bf16') ? 'bf16' : 'fp16';
const NEW = seq2seq ? 64 : 128;
const PROMPT = seq2seq ? 256 : 128;

const checkpoint = folder ? model : join(work, `${model}-ckpt`);
// gqa: the slot decoder built with GroupQueryAttention (to compare with the addon's attention).
const gqa = flags.includes('gqa');
const pa = flags.includes('pa');
const quantized = flags.includes('int8') ? ('int8' as const) : flags.includes('int4') ? ('int4' as const) : undefined;
const dir = join(work, `${basename(model)}-${dtype}${gqa ? '-gqa' : pa ? '-pa' : ''}${quantized === undefined ? '' : `-${quantized}`}`);
if (!existsSync(join(checkpoint, 'config.json'))) {
  if (seq2seq) {
    const spec = SEQ2SEQ_MODELS[model];
    if (spec === undefined) throw new Error(`unknown model ${model}: gpt2 or ${Object.keys(SEQ2SEQ_MODELS).join(', ')}`);
    makeCheckpoint({ ...spec, seed: 1, out: checkpoint });
  } else {
    makeCheckpoint({ arch: 'gpt2', size: 'real', seed: 1, out: checkpoint });
  }
}
if (!existsSync(join(dir, 'onnx', 'decoder_model_slots.onnx'))) buildModel({ source: checkpoint, out: dir, dtype, slotDecoder: true, ...(seq2seq ? {} : { flavor: 'cuda' as const }), ...(gqa ? { slotAttention: 'GroupQueryAttention' as const } : pa ? { slotAttention: 'PagedAttention' as const } : {}), ...(quantized === undefined ? {} : { weights: quantized }) });
const eosField = (JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8')) as { eos_token_id: number | number[] }).eos_token_id;
const eos = Number(Array.isArray(eosField) ? eosField[0] : eosField);
const engine = await NativeEngine.open(dir, {
  provider: 'cuda',
  maxBatchSize: seq2seq ? 128 : 64,
  slotLength: seq2seq ? NEW + 1 : PROMPT + NEW,
  ...(seq2seq ? { sourceLength: PROMPT } : {}),
  cudaGraph: !flags.includes('no-graph'),
  batchInvariant: flags.includes('invariant'),
  greedySteps: flags.includes('one-step') ? 1 : 16,
  continuous: flags.includes('core'),
});
const inputs = seq2seq ? seededRows(batch, PROMPT - 1, 30000).map((row) => [...row, eos]) : seededRows(batch, PROMPT, folder ? 30000 : 50000);
const sampled = flags.includes('sampled');
const params: SamplingParams = {
  ...(beam ? { beam_width: 4, temperature: 1 } : sampled ? { temperature: 0.7, top_p: 0.9 } : { temperature: 0 }),
  request_output_len: NEW,
  ...(seq2seq || beam ? { min_length: NEW } : {}),
};
const run = async (): Promise<number> => {
  const streams = flags.includes('streams');
  const submit = (inputIds: number[], i: number) =>
    lastValueFrom(engine.submit({ inputIds, params: sampled ? { ...params, random_seed: 1000 + i } : params, stream: streams }).pipe(toArray()));
  const done = await Promise.all(inputs.map((inputIds, i) => (streams ? sleep(2 * i).then(() => submit(inputIds, i)) : submit(inputIds, i))));
  return done.reduce((n, events) => n + events.length, 0);
};
await run();
await run();
await sleep(500);
const started = performance.now();
const tokens = await run();
const wallMs = performance.now() - started;
await sleep(300);
await engine.close();
const steps = Math.ceil(tokens / batch);
writeFileSync(out, JSON.stringify({ model, batch, flags, tokens, steps, wallMs, msPerStep: wallMs / steps }, null, 2));
console.log(`${model} batch ${batch} ${flags.join(' ')}: ${tokens} tokens, ${(wallMs / steps).toFixed(3)} ms per step (wall, first token included)`);
