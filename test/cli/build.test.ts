import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BuildInfo } from '../../src/modelbuild/index.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

function chorus(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  // A minute at most: a command that never returns fails the test rather than hanging it.
  const result = spawnSync(process.execPath, [join(ROOT, 'bin/chorus.js'), ...args], { encoding: 'utf8', cwd: ROOT, timeout: 60_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('chorus build --dtype bf16 reports the weights written, the time and the peak RSS, and records them', () => {
  const dir = scratchDir('chorus-cli-build-');
  assert.equal(chorus('make-checkpoint', '--arch', 'llama', '--size', 'tiny', '--seed', '1', '-o', join(dir, 'ckpt')).status, 0);
  const out = chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'onnx'), '--dtype', 'bf16');
  assert.equal(out.status, 0, out.stderr);
  const info = JSON.parse(readFileSync(join(dir, 'onnx', 'chorus_build.json'), 'utf8')) as BuildInfo;
  assert.equal(info.dtype, 'bf16');
  // 512 x 64 embeddings and head, 2 layers of 4 x 64 x 64 - 2 x 32 x 64 attention and 3 x 64 x 172 MLP, 5 norms, in 2 bytes.
  assert.equal(info.stats!.weightBytes, 2 * (2 * 512 * 64 + 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 172) + 5 * 64));
  assert.ok(info.stats!.peakRssBytes > 10 * 1024 * 1024);
  assert.match(out.stdout, /^built .*: 2 layers, hidden 64, 8 heads \(4 kv\), vocab 512, bf16\n {2}[0-9.]+ KB of weights in [0-9.]+ s, peak RSS [0-9.]+ MB\n/);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--dtype', 'bf8').stderr, /--dtype.*bf8.*fp32, fp16, bf16/);
  // A bad group size is named as the flag, before anything is read.
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--weights', 'int4', '--group-size', '48').stderr, /^chorus: --group-size must be one of 16, 32, 64, 128, 256, got 48\n/);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--weights', 'int8', '--group-size', '32').stderr, /^chorus: --group-size must be given with --weights int4, got "32"\n/);
});

test('chorus build takes a Megatron-LM checkpoint directory and a .nemo file, and refuses a pickle that names os.system', () => {
  const dir = scratchDir('chorus-cli-build-torch-');
  const fixtures = join(ROOT, 'test/fixtures/checkpoints');
  for (const [source, name] of [['megatron/v3', 'megatron'], ['nemo/gpt-tp2.nemo', 'nemo']] as const) {
    const out = chorus('build', join(fixtures, source), '-o', join(dir, name));
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, /^built .*: 2 layers, hidden 32, 4 heads \(4 kv\), vocab 256, fp32\n/);
    assert.equal((JSON.parse(readFileSync(join(dir, name, 'chorus_build.json'), 'utf8')) as BuildInfo).architecture, 'gpt2');
  }
  const refused = chorus('build', join(fixtures, 'forbidden/system'), '-o', join(dir, 'forbidden'));
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /pytorch_model\.bin: refused: its pickle names posix\.system, which is not a tensor, a storage or a plain container \(the pickle was read, never run\)/);
});

test('chorus build --tensor-parallel 2 lists each rank\'s files, refuses a count that is not a whole number, generate --model points to a definition, and doctor shows each rank\'s share', () => {
  const dir = scratchDir('chorus-cli-build-tp-');
  assert.equal(chorus('make-checkpoint', '--arch', 'gpt2', '--size', 'tiny', '--seed', '1', '-o', join(dir, 'ckpt')).status, 0);
  const out = chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'tp2'), '--flavor', 'cuda', '--slot-decoder', '--tensor-parallel', '2');
  assert.equal(out.status, 0, out.stderr);
  assert.match(out.stdout, /^built .*: 2 layers, hidden 64, 4 heads \(4 kv\), vocab 512, fp32, tensor parallel 2\n/);
  for (const rank of [0, 1]) for (const file of ['decoder_model_slots.onnx', 'decoder_model_slots.onnx_data', 'decoder_model_paged.onnx']) assert.match(out.stdout, new RegExp(` {2}onnx/tp2/rank${rank}/${file.replace('.', '\\.')}\n`));
  assert.doesNotMatch(out.stdout, /decoder_model_merged/);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--tensor-parallel', '1.5').stderr, /--tensor-parallel must be an integer >= 1, got "1\.5"/);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--tensor-parallel', '2').stderr, /tensor_parallel 2 writes the slot and paged decoders the native engine runs/);
  assert.match(chorus('generate', '--model', join(dir, 'tp2'), '--ids', 'hi').stderr, /is built split over 2 GPUs \(tensor_parallel 2\): generate through a pipeline whose model definition has tensor_parallel: 2/);
  // 2 layers of 2 key/value heads of 16 a GPU, key and value, 4 bytes.
  assert.match(chorus('doctor', '--model', join(dir, 'tp2')).stdout, /: split over 2 GPUs \(tensor_parallel 2\), fp32 weights: rank 0 [0-9.]+ KB, rank 1 [0-9.]+ KB; key\/value cache 0\.5 KiB a token on each GPU\n/);
});

test('chorus build writes its output whole or not at all, and never into a directory of other files', () => {
  const dir = scratchDir('chorus-cli-build-out-');
  assert.equal(chorus('make-checkpoint', '--arch', 'llama', '--size', 'tiny', '--seed', '1', '-o', join(dir, 'ckpt')).status, 0);
  const out = join(dir, 'built');
  assert.equal(chorus('build', join(dir, 'ckpt'), '-o', out, '--greedy-search').status, 0);
  assert.ok(readdirSync(join(out, 'onnx')).includes('decoder_model_greedy.onnx'));
  // A rebuild replaces the last build: none of its files stay.
  assert.equal(chorus('build', join(dir, 'ckpt'), '-o', out).status, 0);
  assert.ok(!readdirSync(join(out, 'onnx')).includes('decoder_model_greedy.onnx'));
  // A failed build leaves the last one as it was, and nothing beside it.
  cpSync(join(dir, 'ckpt'), join(dir, 'broken'), { recursive: true });
  writeFileSync(join(dir, 'broken', 'config.json'), '{"model_type": "llama",');
  const broken = chorus('build', join(dir, 'broken'), '-o', out);
  assert.equal(broken.status, 1);
  assert.match(broken.stderr, /^chorus: .*broken\/config\.json is not valid JSON: /);
  assert.equal(broken.stderr.split('\n').length, 2, 'one line');
  assert.ok(existsSync(join(out, 'chorus_build.json')));
  assert.deepEqual(readdirSync(dir).sort(), ['broken', 'built', 'ckpt']);
  // A directory of other files (the checkpoint itself, say) is refused, not written into.
  const intoSource = chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'ckpt'));
  assert.equal(intoSource.status, 1);
  assert.match(intoSource.stderr, /^chorus: --out .*ckpt holds other files \(no chorus_build\.json\): give a new or empty directory, or an earlier chorus build output\n$/);
  mkdirSync(join(dir, 'empty'));
  assert.equal(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'empty')).status, 0);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', '').stderr, /^chorus: --out must be a directory path, got ""\n$/);
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', join(dir, 'x'), '--lm-head', 'float').stderr, /^chorus: --lm-head must be given with --weights int8 or int4, got "float"\n$/);
  // Under /proc, where Node's recursive mkdir never returns: refused at once.
  assert.match(chorus('build', join(dir, 'ckpt'), '-o', '/proc/chorus-x/y').stderr, /^chorus: --out \/proc\/chorus-x: cannot make \/proc\/chorus-x \(ENOENT\)\n$/);
  assert.match(chorus('make-checkpoint', '--arch', 'llama', '--seed', '1', '-o', '/proc/chorus-x').stderr, /^chorus: --out \/proc\/chorus-x: cannot make \/proc\/chorus-x \(ENOENT\)\n$/);
});

test('chorus export gguf never writes over a file it reads, and leaves no half-written file', () => {
  const dir = scratchDir('chorus-cli-export-');
  assert.equal(chorus('make-checkpoint', '--arch', 'llama', '--size', 'tiny', '--seed', '1', '-o', join(dir, 'ckpt')).status, 0);
  const weights = readFileSync(join(dir, 'ckpt', 'model.safetensors'));
  const over = chorus('export', 'gguf', join(dir, 'ckpt'), '--out', join(dir, 'ckpt', 'model.safetensors'));
  assert.equal(over.status, 1);
  assert.match(over.stderr, /^chorus: out .*model\.safetensors is a file the export reads: write the \.gguf elsewhere\n$/);
  assert.deepEqual(readFileSync(join(dir, 'ckpt', 'model.safetensors')), weights);
  // A checkpoint made here has no tokenizer: the export fails, and no file (partial or whole) is left.
  const failed = chorus('export', 'gguf', join(dir, 'ckpt'), '--out', join(dir, 'x.gguf'));
  assert.equal(failed.status, 1);
  assert.deepEqual(readdirSync(dir), ['ckpt']);
});
