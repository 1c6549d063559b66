import assert from 'node:assert/strict';
import { cpSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileRanges } from '../../../src/modelbuild/file-range.ts';
import { readSafetensors } from '../../../src/modelbuild/safetensors.ts';
import { readMegatronCheckpoint } from '../../../src/modelbuild/torch/megatron.ts';
import { readNemoCheckpoint } from '../../../src/modelbuild/torch/nemo.ts';
import { readTarEntries } from '../../../src/modelbuild/torch/tar.ts';
import { f32, tensorPy, torchSave, type Py } from '../../helpers/pickle-writer.ts';
import { scratchDir } from '../../helpers/scratch.ts';

const FIXTURES = new URL('../../fixtures/checkpoints/', import.meta.url).pathname;
const root = scratchDir('chorus-megatron-');
const twin = readSafetensors(join(FIXTURES, 'megatron/hf/model.safetensors'));

/** A fresh copy of a fixture directory. */
function copy(fixture: string, name: string): string {
  const dir = join(root, name);
  cpSync(join(FIXTURES, fixture), dir, { recursive: true });
  return dir;
}

/** A one-rank Megatron checkpoint whose args carry `overrides` (weights: the embeddings only). */
function withArgs(name: string, overrides: Array<[string, Py]>, extraEmbeddings: string[] = []): string {
  const dir = join(root, name);
  mkdirSync(join(dir, 'release', 'mp_rank_00'), { recursive: true });
  writeFileSync(join(dir, 'latest_checkpointed_iteration.txt'), 'release');
  const args: Py = { build: [{ newobj: [{ global: 'argparse.Namespace' }, []] }, new Map<Py, Py>([['num_layers', 1], ['hidden_size', 2], ['num_attention_heads', 1], ['tensor_model_parallel_size', 1], ...overrides])] };
  const embedding = (key: string): Py => new Map<Py, Py>([['weight', tensorPy(key, 'FloatStorage', 4, 0, [2, 2], [2, 1])]]);
  const embeddings: Array<[Py, Py]> = [['word_embeddings', embedding('0')], ['position_embeddings', embedding('1')], ...extraEmbeddings.map((key): [Py, Py] => [key, embedding('1')])];
  const lm = new Map<Py, Py>([['embedding', new Map<Py, Py>(embeddings)], ['encoder', new Map<Py, Py>()]]);
  torchSave(join(dir, 'release', 'mp_rank_00', 'model_optim_rng.pt'), new Map<Py, Py>([['model', new Map<Py, Py>([['language_model', lm]])], ['args', args], ['checkpoint_version', { float: 3 }]]), new Map([['0', f32([1, 2, 3, 4])], ['1', f32([5, 6, 7, 8])]]));
  return dir;
}

test('Megatron args a GPT-2 layout cannot express are refused, naming the argument', () => {
  assert.throws(() => readMegatronCheckpoint(withArgs('swiglu', [['swiglu', true]])), /model_optim_rng\.pt: args\.swiglu true is not supported; the Megatron GPT read here has a GELU MLP/);
  assert.throws(() => readMegatronCheckpoint(withArgs('rmsnorm', [['normalization', 'RMSNorm']])), /args\.normalization "RMSNorm" is not supported; the Megatron GPT read here has LayerNorm/);
  assert.throws(() => readMegatronCheckpoint(withArgs('rope', [['position_embedding_type', 'rope']])), /args\.position_embedding_type "rope" is not supported/);
  assert.throws(() => readMegatronCheckpoint(withArgs('untied', [['untie_embeddings_and_output_weights', true]])), /args\.untie_embeddings_and_output_weights true is not supported/);
});

test('an embedding beyond words and positions (token types) is refused by name', () => {
  assert.throws(() => readMegatronCheckpoint(withArgs('tokentype', [], ['tokentype_embeddings'])), /model_optim_rng\.pt: model\.language_model\.embedding\.tokentype_embeddings is not read; only word and position embeddings are/);
});

test('a missing tensor-parallel rank is named', () => {
  const one = copy('megatron/v3', 'one-rank');
  rmSync(join(one, 'iter_0000100', 'mp_rank_01'), { recursive: true });
  assert.throws(() => readMegatronCheckpoint(one), /args\.tensor_model_parallel_size is 2, but 1 mp_rank directories were found/);
  const gap = copy('megatron/v3', 'gap');
  renameSync(join(gap, 'iter_0000100', 'mp_rank_01'), join(gap, 'iter_0000100', 'mp_rank_02'));
  assert.throws(() => readMegatronCheckpoint(gap), /rank 1 is missing \(found mp_rank_00, mp_rank_02\)/);
  const distributed = join(root, 'distcp');
  mkdirSync(join(distributed, 'iter_0000100'), { recursive: true });
  writeFileSync(join(distributed, 'latest_checkpointed_iteration.txt'), '100');
  writeFileSync(join(distributed, 'iter_0000100', '__0_0.distcp'), '');
  assert.throws(() => readMegatronCheckpoint(distributed), /is in Megatron's distributed checkpoint format \(torch_dist, \*\.distcp files\), which is not read/);
  const stale = copy('megatron/v3', 'stale');
  writeFileSync(join(stale, 'latest_checkpointed_iteration.txt'), '200');
  assert.throws(() => readMegatronCheckpoint(stale), /latest_checkpointed_iteration\.txt names "200", but .*iter_0000200 does not exist/);
});

test('without args, a config.json beside the checkpoint gives the heads, and its vocab_size keeps the first rows of the padded vocabulary', () => {
  const bare = copy('megatron/v0', 'no-config');
  rmSync(join(bare, 'config.json'));
  assert.throws(() => readMegatronCheckpoint(bare), /the checkpoint has no args, so the number of heads must come from a config\.json beside it/);
  const cut = copy('megatron/v0', 'vocab');
  writeFileSync(join(cut, 'config.json'), JSON.stringify({ n_head: 4, vocab_size: 250, eos_token_id: 0 }));
  const checkpoint = readMegatronCheckpoint(cut);
  assert.equal(checkpoint.config.vocab_size, 250);
  assert.equal(checkpoint.config.eos_token_id, 0);
  const full = twin.get('transformer.wte.weight')!.data;
  assert.deepEqual(checkpoint.take('transformer.wte.weight', [250, 32]).data, full.subarray(0, 250 * 32));
});

/** The .nemo fixture unpacked into a directory, its model_config.yaml edited by `edit`. */
function unpacked(name: string, edit: (yaml: string) => string = (yaml) => yaml): string {
  const dir = join(root, name);
  const nemo = join(FIXTURES, 'nemo/gpt-tp2.nemo');
  for (const [entry, bytes] of readTarEntries(fileRanges(nemo), nemo)) {
    mkdirSync(dirname(join(dir, entry)), { recursive: true });
    writeFileSync(join(dir, entry), bytes.read(0, bytes.size));
  }
  writeFileSync(join(dir, 'model_config.yaml'), edit(readFileSync(join(dir, 'model_config.yaml'), 'utf8')));
  return dir;
}

test('an unpacked .nemo directory reads as the archive does', () => {
  const checkpoint = readNemoCheckpoint(unpacked('nemo-dir'));
  for (const [name, tensor] of twin) assert.deepEqual(checkpoint.take(name, tensor.dims).data, tensor.data, name);
});

test('NeMo GPT options a GPT-2 layout does not express are refused, naming the field', () => {
  const t5 = unpacked('t5', (yaml) => yaml.replace(/^target: .*$/m, 'target: nemo.collections.nlp.models.language_modeling.megatron_t5_model.MegatronT5Model'));
  // A T5 target reads the archive as NeMo's T5 (nemo-t5.test.ts), which refuses this GPT's two ranks.
  assert.throws(() => readNemoCheckpoint(t5), /tensor_model_parallel_size 2 is not supported; the NeMo T5 read here has one tensor-parallel rank/);
  const mcore = unpacked('mcore', (yaml) => `${yaml}mcore_gpt: true\n`);
  assert.throws(() => readNemoCheckpoint(mcore), /model_config\.yaml mcore_gpt true is not supported; the NeMo GPT read here has the Megatron-LM layout/);
  const rms = unpacked('rms', (yaml) => yaml.replace('normalization: layernorm', 'normalization: rmsnorm'));
  assert.throws(() => readNemoCheckpoint(rms), /model_config\.yaml normalization "rmsnorm" is not supported/);
  const missing = unpacked('missing');
  rmSync(join(missing, 'mp_rank_01'), { recursive: true });
  assert.throws(() => readNemoCheckpoint(missing), /has no mp_rank_01\/model_weights\.ckpt \(tensor_model_parallel_size is 2\)/);
});

test('a truncated .nemo archive is refused as truncated', () => {
  const bytes = readFileSync(join(FIXTURES, 'nemo/gpt-tp2.nemo'));
  const cut = join(root, 'cut.nemo');
  writeFileSync(cut, bytes.subarray(0, Math.floor(bytes.length / 2)));
  assert.throws(() => readNemoCheckpoint(cut), /cut\.nemo is not a readable \.nemo archive: entry .* lies past the end of the archive: the file is truncated/);
  const gz = readFileSync(join(FIXTURES, 'nemo/gpt-tp1.nemo'));
  const cutGz = join(root, 'cut-gz.nemo');
  writeFileSync(cutGz, gz.subarray(0, Math.floor(gz.length / 2)));
  assert.throws(() => readNemoCheckpoint(cutGz), /cut-gz\.nemo is a damaged or truncated gzip archive/);
});

test('NeMo weights saved under megatron_amp_O2 (names under model.module.) read like any others', () => {
  const dir = join(root, 'amp-o2');
  mkdirSync(dir);
  writeFileSync(join(dir, 'model_config.yaml'), 'target: nemo.collections.nlp.models.language_modeling.megatron_gpt_model.MegatronGPTModel\ntensor_model_parallel_size: 1\nnum_layers: 1\nhidden_size: 4\nffn_hidden_size: 8\nnum_attention_heads: 1\nmegatron_amp_O2: true\n');
  const shapes: Array<[string, number[]]> = [
    ['embedding.word_embeddings.weight', [4, 4]],
    ['embedding.position_embeddings.weight', [2, 4]],
    ['encoder.layers.0.input_layernorm.weight', [4]],
    ['encoder.layers.0.input_layernorm.bias', [4]],
    ['encoder.layers.0.self_attention.query_key_value.weight', [12, 4]],
    ['encoder.layers.0.self_attention.query_key_value.bias', [12]],
    ['encoder.layers.0.self_attention.dense.weight', [4, 4]],
    ['encoder.layers.0.self_attention.dense.bias', [4]],
    ['encoder.layers.0.post_attention_layernorm.weight', [4]],
    ['encoder.layers.0.post_attention_layernorm.bias', [4]],
    ['encoder.layers.0.mlp.dense_h_to_4h.weight', [8, 4]],
    ['encoder.layers.0.mlp.dense_h_to_4h.bias', [8]],
    ['encoder.layers.0.mlp.dense_4h_to_h.weight', [4, 8]],
    ['encoder.layers.0.mlp.dense_4h_to_h.bias', [4]],
    ['encoder.final_layernorm.weight', [4]],
    ['encoder.final_layernorm.bias', [4]],
  ];
  const storages = new Map<string, Uint8Array>();
  const sd = new Map<Py, Py>();
  shapes.forEach(([name, dims], i) => {
    const count = dims.reduce((a, b) => a * b, 1);
    storages.set(String(i), f32(Array.from({ length: count }, (_, k) => i * 100 + k)));
    sd.set(`model.module.language_model.${name}`, tensorPy(String(i), 'FloatStorage', count, 0, dims, dims.length === 2 ? [dims[1]!, 1] : [1]));
  });
  torchSave(join(dir, 'model_weights.ckpt'), sd, storages);
  const checkpoint = readNemoCheckpoint(dir);
  assert.deepEqual(Array.from(checkpoint.take('transformer.h.0.mlp.c_fc.bias', [8]).data), [1100, 1101, 1102, 1103, 1104, 1105, 1106, 1107]);
  // One head, checkpoint_version 3: the fused bias is [q | k | v] as it stands.
  assert.deepEqual(Array.from(checkpoint.take('transformer.h.0.attn.c_attn.bias', [12]).data), Array.from({ length: 12 }, (_, k) => 500 + k));
});
