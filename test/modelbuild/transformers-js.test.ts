import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { buildModel, makeCheckpoint } from '../../src/modelbuild/index.ts';
import { DecoderSession } from '../../src/runtime/index.ts';
import { scratchDir } from '../helpers/scratch.ts';

// transformers.js runs on the same onnxruntime-node as Chorus (package.json pins it through overrides).
env.allowRemoteModels = false;
const root = scratchDir('chorus-tjs-');

for (const arch of ['gpt2', 'llama'] as const) {
  test(`transformers.js loads the built tiny ${arch} and its greedy generate gives Chorus's ids`, async () => {
    const checkpoint = join(root, arch);
    makeCheckpoint({ arch, size: 'tiny', seed: 11, out: checkpoint });
    buildModel({ source: checkpoint, out: `${checkpoint}-onnx` });

    const prompt = [3, 14, 15, 92, 65];
    const steps = 24;
    const session = await DecoderSession.open(`${checkpoint}-onnx`);
    const ours = await session.greedy(prompt, steps);
    await session.close();

    const model = await AutoModelForCausalLM.from_pretrained(`${checkpoint}-onnx`, {
      local_files_only: true,
      dtype: 'fp32',
      device: 'cpu',
      model_file_name: 'decoder_model_merged' });
    const inputIds = new Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, prompt.length]);
    // No stopping: eos is set to an id outside the vocabulary, and the exact length is asked for.
    const output = (await model.generate({ input_ids: inputIds, max_new_tokens: steps, min_new_tokens: steps, do_sample: false, eos_token_id: -1 })) as Tensor;
    const theirs = Array.from(output.data as BigInt64Array, Number).slice(prompt.length);
    await model.dispose();
    assert.deepEqual(theirs, ours);
  });
}
