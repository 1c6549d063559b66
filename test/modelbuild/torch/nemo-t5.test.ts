/**
 * NeMo Megatron T5 and UL2 (`.nemo` archives of MegatronT5Model) build directly: a tiny random Hugging
 * Face T5 v1.1 and UL2 the test makes, rewritten in NeMo's layout (test/helpers/nemo-t5.ts), build to
 * the same ONNX weights and the same greedy ids as the Hugging Face checkpoint they came from; the NeMo
 * variants the T5 builder cannot express are refused by name.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { buildModel, makeCheckpoint } from '../../../src/modelbuild/index.ts';
import { readNemoCheckpoint } from '../../../src/modelbuild/torch/nemo.ts';
import { Seq2SeqSession } from '../../../src/runtime/index.ts';
import { tarNemo, writeNemoT5Dir } from '../../helpers/nemo-t5.ts';
import { builtWeights } from '../../helpers/onnx-weights.ts';
import { scratchDir } from '../../helpers/scratch.ts';

const root = scratchDir('chorus-nemo-t5-');
const PROMPTS = [[5, 17, 99, 200, 3, 1], [8, 9, 1], [300, 301, 302, 303, 304, 305, 306, 1]];

for (const { arch, megatronLegacy } of [
  { arch: 't5v1_1', megatronLegacy: false },
  { arch: 'ul2', megatronLegacy: true },
] as const) {
  describe(`a NeMo ${arch === 'ul2' ? 'UL2 (SwiGLU)' : 'T5 v1.1 (GeGLU)'}, megatron_legacy ${megatronLegacy}`, () => {
    const hf = join(root, `${arch}-hf`);
    const nemoDir = join(root, `${arch}-nemo`);
    const nemoFile = join(root, `${arch}.nemo`);
    before(() => {
      makeCheckpoint({ arch, size: 'tiny', seed: 11, out: hf });
      writeNemoT5Dir(hf, nemoDir, { megatronLegacy });
      tarNemo(nemoDir, nemoFile);
      buildModel({ source: hf, out: `${hf}-onnx` });
      buildModel({ source: nemoFile, out: `${nemoFile}-onnx` });
      buildModel({ source: nemoDir, out: `${nemoDir}-onnx` });
    });

    test('the .nemo archive and its unpacked directory build the ONNX weights of the Hugging Face twin', () => {
      for (const model of ['encoder_model.onnx', 'decoder_model_merged.onnx']) {
        const twin = builtWeights(`${hf}-onnx`, model);
        for (const built of [`${nemoFile}-onnx`, `${nemoDir}-onnx`]) {
          const weights = builtWeights(built, model);
          assert.deepEqual([...weights.keys()].sort(), [...twin.keys()].sort(), `${built} ${model}`);
          for (const [name, w] of twin) assert.ok(weights.get(name)!.bytes.equals(w.bytes), `${built} ${model}: ${name}`);
        }
      }
    });

    test('the built model gives the greedy ids of the Hugging Face twin', async () => {
      const [twin, nemo] = await Promise.all([Seq2SeqSession.open(`${hf}-onnx`), Seq2SeqSession.open(`${nemoFile}-onnx`)]);
      try {
        for (const prompt of PROMPTS) assert.deepEqual(await nemo.greedy(prompt, 16), await twin.greedy(prompt, 16), prompt.join(','));
      } finally {
        await Promise.all([twin.close(), nemo.close()]);
      }
    });

    test("the config is T5's, untied, with the model's shape", () => {
      const config = readNemoCheckpoint(nemoFile).config;
      const source = JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8')) as Record<string, unknown>;
      for (const key of ['vocab_size', 'd_model', 'd_kv', 'd_ff', 'num_heads', 'num_layers', 'num_decoder_layers', 'feed_forward_proj', 'relative_attention_num_buckets']) assert.equal(config[key], source[key], key);
      assert.equal(config.tie_word_embeddings, false);
    });
  });
}

test("megatron_amp_O2's wrapped names (enc_dec_model.module.) read as the plain ones", () => {
  const hf = join(root, 'o2-hf');
  makeCheckpoint({ arch: 't5v1_1', size: 'tiny', seed: 13, out: hf });
  writeNemoT5Dir(hf, join(root, 'o2-plain'), { megatronLegacy: false });
  writeNemoT5Dir(hf, join(root, 'o2-wrapped'), { megatronLegacy: false, ampO2: true });
  const [plain, wrapped] = [readNemoCheckpoint(join(root, 'o2-plain')), readNemoCheckpoint(join(root, 'o2-wrapped'))];
  assert.deepEqual(wrapped.names().sort(), plain.names().sort());
  for (const name of plain.names()) assert.deepEqual(wrapped.peek(name).data, plain.peek(name).data, name);
});

test('NeMo T5 variants the T5 builder does not express are refused, naming the field', () => {
  const hf = join(root, 'refused-hf');
  makeCheckpoint({ arch: 't5v1_1', size: 'tiny', seed: 12, out: hf });
  const dir = join(root, 'refused-nemo');
  writeNemoT5Dir(hf, dir, { megatronLegacy: false });
  const yaml = readFileSync(join(dir, 'model_config.yaml'), 'utf8');
  const refused = (edit: (text: string) => string, message: RegExp): void => {
    writeFileSync(join(dir, 'model_config.yaml'), edit(yaml));
    assert.throws(() => readNemoCheckpoint(dir), message);
  };
  refused((t) => t.replaceAll('position_embedding_type: relative', 'position_embedding_type: learned_absolute'), /encoder\.position_embedding_type "learned_absolute" is not supported; the NeMo T5 read here has T5's relative position buckets/);
  refused((t) => t.replaceAll('activation: geglu', 'activation: reglu'), /encoder\.activation "reglu" is not supported; the NeMo T5 read here has geglu \(T5 v1\.1, mT5\), swiglu \(UL2\) or relu/);
  refused((t) => t.replaceAll('openai_gelu: true', 'openai_gelu: false'), /encoder\.openai_gelu false is not supported; the NeMo T5 read here has GeGLU over OpenAI's tanh GELU/);
  refused((t) => t.replaceAll('normalization: rmsnorm', 'normalization: layernorm'), /encoder\.normalization "layernorm" is not supported/);
  refused((t) => t.replace('tokens_head_bias: false', 'tokens_head_bias: true'), /tokens_head_bias true is not supported; the NeMo T5 read here has no bias on the head/);
  refused((t) => t.replace('tensor_model_parallel_size: 1', 'tensor_model_parallel_size: 2'), /tensor_model_parallel_size 2 is not supported; the NeMo T5 read here has one tensor-parallel rank/);
  refused((t) => t.replace(/(decoder:\n(?:.*\n)*?) {2}kv_channels: 16/, '$1  kv_channels: 8'), /decoder\.headDim 8 is not supported; the NeMo T5 read here has the encoder's headDim \(16\) in the decoder too/);
  refused((t) => t.replace('target: nemo.collections.nlp.models.language_modeling.megatron_t5_model.MegatronT5Model', 'target: nemo.collections.nlp.models.language_modeling.megatron_bart_model.MegatronBARTModel'), /MegatronBARTModel is not supported; NeMo GPT \(MegatronGPTModel\) and T5 \(MegatronT5Model\) models are/);
});
