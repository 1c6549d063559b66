/**
 * A ragged prefill in one run: a float16 slot decoder's head (the addon's Linear taking the last
 * position) takes `last_index`, each row's own last token, so prompts padded to one width need no
 * second run of their last tokens. On the CPU, against the two runs (CHORUS_PREFILL_ONE_RUN=0) and each
 * prompt alone.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import onnxProto from 'onnx-proto';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { loadNative } from '../../src/native/index.ts';
import type { RaggedOutcome } from '../helpers/ragged-prefill.ts';
import { scratchDir } from '../helpers/scratch.ts';

const { addon, reason } = loadNative();
const skip = addon === undefined ? `the native addon: ${reason}` : false;
const root = scratchDir('chorus-prefill-');
const fp16 = join(root, 'llama-fp16');

type Graph = onnxProto.onnx.IGraphProto;

function graphOf(dir: string, file = 'decoder_model_slots.onnx'): Graph {
  return onnxProto.onnx.ModelProto.decode(readFileSync(join(dir, 'onnx', file))).graph!;
}

/** The Linear whose output the logits are (through an Identity), if any. */
function headOf(graph: Graph): onnxProto.onnx.INodeProto | undefined {
  const producer = (name: string): onnxProto.onnx.INodeProto | undefined => graph.node!.find((n) => n.output!.includes(name));
  let node = producer('logits');
  while (node?.opType === 'Identity') node = producer(node.input![0]!);
  return node?.opType === 'Linear' ? node : undefined;
}

/** raggedPrefill in a process of its own, CHORUS_PREFILL_ONE_RUN as given (undefined: unset), and its core's trace. */
function raggedPrefillIn(oneRun: '0' | undefined): { outcome: RaggedOutcome; trace: string } {
  const name = oneRun === undefined ? 'one' : 'two';
  const script = join(root, `${name}.mts`);
  const trace = join(root, `${name}.trace`);
  const helper = fileURLToPath(new URL('../helpers/ragged-prefill.ts', import.meta.url));
  writeFileSync(script, `import { raggedPrefill } from ${JSON.stringify(helper)};\nconsole.log(JSON.stringify(await raggedPrefill(${JSON.stringify(fp16)})));\n`);
  const env: NodeJS.ProcessEnv = { ...process.env, CHORUS_CORE_TRACE: trace };
  delete env.CHORUS_PREFILL_ONE_RUN;
  if (oneRun !== undefined) env.CHORUS_PREFILL_ONE_RUN = oneRun;
  const tsx = fileURLToPath(new URL('../../node_modules/.bin/tsx', import.meta.url));
  const child = spawnSync(tsx, [script], { encoding: 'utf8', timeout: 120_000, env });
  assert.equal(child.status, 0, child.stderr);
  return { outcome: JSON.parse(child.stdout.trim().split('\n').at(-1)!) as RaggedOutcome, trace: readFileSync(trace, 'utf8') };
}

/** The largest difference between two rows of logits each. */
function largestDifference(got: number[][], want: number[][]): number {
  return got.reduce((m, row, r) => row.reduce((n, x, i) => Math.max(n, Math.abs(x - want[r]![i]!)), m), 0);
}

/** The (first) run widths of the core's prefills in its trace. */
function prefillWidths(trace: string): number[] {
  return [...trace.matchAll(/ prefill rows \d+ \(run \d+ x (\d+)\)/g)].map((m) => Number(m[1]));
}

describe('one-run ragged prefills', { skip }, () => {
  before(() => {
    makeCheckpoint({ arch: 'llama', size: 'tiny', seed: 5, out: join(root, 'llama-ckpt') });
    buildModel({ source: join(root, 'llama-ckpt'), out: fp16, flavor: 'cuda', slotDecoder: true, dtype: 'fp16' });
  });

  test("the float16 slot decoder takes last_index into its head's Linear (input 6); float32, the paged decoder and unfolded norms do not", (t) => {
    const graph = graphOf(fp16);
    const input = graph.input!.find((i) => i.name === 'last_index');
    assert.ok(input !== undefined, 'no last_index input');
    assert.equal(input.type!.tensorType!.elemType, onnxProto.onnx.TensorProto.DataType.INT32);
    assert.deepEqual(input.type!.tensorType!.shape!.dim!.map((d) => d.dimParam), ['batch_size']);
    const head = headOf(graph)!;
    assert.equal(Number(head.attribute!.find((a) => a.name === 'last')?.i), 1);
    // The final norm folded in (inputs 3 and 4), no post-norm, then last_index.
    assert.equal(head.input!.length, 7);
    assert.deepEqual([head.input![5], head.input![6]], ['', 'last_index']);
    assert.match(head.input![4]!, /final_norm/);
    assert.equal(graph.node!.filter((n) => n.input!.includes('last_index')).length, 1);
    assert.equal(graphOf(fp16, 'decoder_model_paged.onnx').input!.some((i) => i.name === 'last_index'), false);
    const fp32 = join(root, 'llama-fp32');
    buildModel({ source: join(root, 'llama-ckpt'), out: fp32, flavor: 'cuda', slotDecoder: true });
    assert.equal(graphOf(fp32).input!.some((i) => i.name === 'last_index'), false);
    assert.equal(headOf(graphOf(fp32)), undefined);
    // CHORUS_FOLD_NORMS=pre: the head after a Slice, the final norm apart.
    t.after(() => delete process.env.CHORUS_FOLD_NORMS);
    process.env.CHORUS_FOLD_NORMS = 'pre';
    const pre = join(root, 'llama-fp16-pre');
    buildModel({ source: join(root, 'llama-ckpt'), out: pre, flavor: 'cuda', slotDecoder: true, dtype: 'fp16' });
    assert.equal(graphOf(pre).input!.some((i) => i.name === 'last_index'), false);
  });

  test("prompts of 5, 17, 33, 32 and 1 tokens in one run: the two runs' ids and logits, and each prompt's alone, in the decoder and the continuous core", () => {
    const one = raggedPrefillIn(undefined);
    const two = raggedPrefillIn('0');
    for (const [name, { outcome }] of [['one run', one], ['two runs', two]] as const) {
      assert.deepEqual(outcome.together, outcome.alone, name);
      assert.ok(largestDifference(outcome.logits, outcome.aloneLogits) <= 1e-3, `${name}: the prefill's logits differ from each prompt's alone by ${largestDifference(outcome.logits, outcome.aloneLogits)}`);
      assert.deepEqual(outcome.core.together, outcome.core.alone, `${name}, the core`);
      assert.ok(outcome.warmedSame, `${name}: the warmed decoder's answers changed`);
    }
    assert.deepEqual(one.outcome.together, two.outcome.together);
    assert.ok(largestDifference(one.outcome.logits, two.outcome.logits) <= 1e-3, `the logits differ by ${largestDifference(one.outcome.logits, two.outcome.logits)}`);
    assert.deepEqual(one.outcome.core.together, two.outcome.core.together);
    assert.deepEqual(one.outcome.core.together.map((ids) => ids.slice(0, 11)), one.outcome.together);
    // The core's buckets: the whole prompt's width in one run (33 tokens: 64), all but its last token's
    // in two (32; none for a prompt of one token alone); the warm-up's widths likewise (4 slots of 100:
    // widths 32, 64, 96 and 100 by rows 1, 2 and 4 in one run; 32, 64 and 96 in two).
    assert.ok(prefillWidths(one.trace).includes(64) && prefillWidths(one.trace).every((w) => w === 32 || w === 64), one.trace);
    assert.ok(prefillWidths(two.trace).every((w) => w === 0 || w === 32), two.trace);
    assert.equal(one.outcome.warmed, 12);
    assert.equal(two.outcome.warmed, 9);
  });
});
