/** `chorus build` and `chorus make-checkpoint`. */
import { Option, type Command } from 'commander';
import cliProgress from 'cli-progress';
import { buildModel, bytesText, checkGroupSize, CHECKPOINT_ARCHS, CHECKPOINT_DTYPES, makeCheckpoint, quantSummaryText, SLOT_DECODER_ATTENTIONS, type BuildDtype, type BuildStage, type CheckpointArch, type CheckpointDtype, type CheckpointSize, type SlotDecoderAttention, type WeightsMode } from '../modelbuild/index.ts';
import { invalidArgument } from '../errors.ts';
import { makeDirectory, replaceDirectory } from '../util/output-dir.ts';

export function registerBuild(program: Command): void {
  program
    .command('build')
    .description('build an ONNX model directory (Optimum / transformers.js layout) from a checkpoint')
    .argument('<source>', 'a Hugging Face checkpoint directory (config.json + safetensors or pytorch_model.bin), a .pt state dict, a Megatron-LM GPT checkpoint, a NeMo GPT or T5 model, or a llama2.c .bin')
    .requiredOption('-o, --out <dir>', 'the output directory')
    .addOption(new Option('--dtype <dtype>', 'weights and activations').choices(['fp32', 'fp16', 'bf16']).default('fp32'))
    .addOption(new Option('--flavor <flavor>', 'portable: standard ONNX operators, any execution provider').choices(['portable', 'cuda']).default('portable'))
    .addOption(new Option('--task <task>', 'generate: the decoder (and encoder); encode: an encoder alone, hidden states out').choices(['generate', 'encode']).default('generate'))
    .option('--output-attentions', 'encoders: also output each layer\'s attention probabilities (attentions.N)')
    .option('--greedy-search', 'decoder-only: also write onnx/decoder_model_greedy.onnx, the whole greedy decode loop in one ONNX Runtime GreedySearch operator')
    .option('--slot-decoder', 'also write onnx/decoder_model_slots.onnx (and an encoder-decoder\'s onnx/encoder_model_slots.onnx), the models the native engine runs over a cache kept on the device; decoder-only models need --flavor cuda')
    .addOption(
      new Option('--slot-attention <kind>', "with --slot-decoder, decoder-only: the slot decoder's attention for fp16/bf16 rotary models; addon: the addon's PagedAttention for heads of 64, 96, 128 or 256 and for q/k norms (Qwen3), GroupQueryAttention for others; PagedAttention or GroupQueryAttention: that one for all")
        .choices([...SLOT_DECODER_ATTENTIONS])
        .default('addon'),
    )
    .option('--tensor-parallel <n>', 'decoder-only, with --slot-decoder: split the model over n GPUs (Megatron-style), each rank\'s decoders in onnx/tp<n>/rank<r>/ (default 1)')
    .option('--tokenizer <file>', 'llama2.c sources: the tokenizer.bin (default: found beside the model)')
    .addOption(new Option('--weights <weights>', 'decoder-only: the projections as the checkpoint stores them (float, or GPTQ / AWQ 4-bit), or quantized to int8 (per output channel) or int4 (groups); --dtype stays the activations\' type').choices(['checkpoint', 'int8', 'int4']).default('checkpoint'))
    .option('--group-size <n>', 'int4: values per scale, 16, 32, 64, 128 or 256 (default 128; smaller for small models)')
    .addOption(new Option('--lm-head <weights>', 'int8 / int4: quantize the LM head too, or keep it float (default: quantized for int8, float for int4)').choices(['quantized', 'float']))
    .action((source: string, options: { out: string; dtype: BuildDtype; flavor: 'portable' | 'cuda'; task: 'generate' | 'encode'; outputAttentions?: boolean; greedySearch?: boolean; slotDecoder?: boolean; slotAttention: SlotDecoderAttention; tokenizer?: string; tensorParallel?: string; weights: WeightsMode; groupSize?: string; lmHead?: 'quantized' | 'float' }) => {
      if (options.groupSize !== undefined) {
        if (!/^\d+$/.test(options.groupSize)) throw invalidArgument('--group-size', '16, 32, 64, 128 or 256', options.groupSize);
        checkGroupSize(Number(options.groupSize), '--group-size');
        if (options.weights !== 'int4') throw invalidArgument('--group-size', 'given with --weights int4', options.groupSize);
      }
      if (options.lmHead !== undefined && options.weights !== 'int8' && options.weights !== 'int4') throw invalidArgument('--lm-head', 'given with --weights int8 or int4', options.lmHead);
      if (options.tensorParallel !== undefined && !/^[1-9]\d*$/.test(options.tensorParallel)) throw invalidArgument('--tensor-parallel', 'an integer >= 1', options.tensorParallel);
      const bar = new cliProgress.SingleBar(
        { format: 'build [{bar}] {percentage}% {written} {stage}', noTTYOutput: false, stream: process.stderr, clearOnComplete: false },
        cliProgress.Presets.shades_classic,
      );
      bar.start(1, 0, { stage: 'read checkpoint', written: '' });
      let result;
      try {
        // Built beside --out and moved into place when whole: a failed build leaves no half-written
        // model, and a rebuild no files of the last one.
        result = replaceDirectory(options.out, '--out', { file: 'chorus_build.json', what: 'chorus build output' }, (staging) =>
          buildModel({
          source,
          out: staging,
          dtype: options.dtype,
          flavor: options.flavor,
          task: options.task,
          outputAttentions: options.outputAttentions ?? false,
          greedySearch: options.greedySearch ?? false,
          slotDecoder: options.slotDecoder ?? false,
          slotAttention: options.slotAttention,
          tokenizer: options.tokenizer,
          weights: options.weights,
          ...(options.groupSize === undefined ? {} : { groupSize: Number(options.groupSize) }),
          ...(options.tensorParallel === undefined ? {} : { tensorParallel: Number(options.tensorParallel) }),
          ...(options.lmHead === undefined ? {} : { quantizeHead: options.lmHead === 'quantized' }),
          onProgress: (stage: BuildStage) => bar.update({ stage }),
          onWeights: (done, total) => {
            bar.setTotal(total);
            bar.update(done, { written: `${bytesText(done)}/${bytesText(total)}` });
          },
          }),
        );
        bar.update(bar.getTotal(), { stage: 'done' });
      } finally {
        bar.stop();
      }
      const { spec } = result;
      const shape =
        'hiddenSize' in spec
          ? `${spec.numLayers} layers, hidden ${spec.hiddenSize}, ${spec.numHeads} heads (${spec.numKvHeads} kv)`
          : `${spec.encoderLayers}+${spec.decoderLayers} layers, d_model ${spec.dModel}, ${spec.numHeads} heads`;
      const { seconds, weightBytes, peakRssBytes } = result.stats;
      const split = options.tensorParallel === undefined || options.tensorParallel === '1' ? '' : `, tensor parallel ${options.tensorParallel}`;
      process.stdout.write(`built ${options.out}: ${shape}, vocab ${spec.vocabSize}, ${options.dtype}${split}\n`);
      if (result.quantization !== undefined) process.stdout.write(`  ${quantSummaryText(result.quantization, options.dtype)}\n`);
      process.stdout.write(`  ${bytesText(weightBytes)} of weights in ${seconds} s, peak RSS ${bytesText(peakRssBytes)}\n${result.files.map((file) => `  ${file}\n`).join('')}`);
    });

  program
    .command('make-checkpoint')
    .description('write a random, seeded Hugging Face checkpoint (config.json + model.safetensors)')
    .addOption(new Option('--arch <arch>', 'architecture').choices([...CHECKPOINT_ARCHS]).makeOptionMandatory())
    .addOption(
      new Option(
        '--size <size>',
        'tiny: width 64; real: GPT-2 124M, Qwen2-0.5B, t5-small, t5-v1_1-small, bart-base, Llama-3.2-1B, Qwen3-1.7B, Mistral-7B-v0.1, Phi-3-mini-4k, Gemma-2-2B shapes; base: t5-base shapes; large: bart-large',
      )
        .choices(['tiny', 'real', 'base', 'large'])
        .default('tiny'),
    )
    .addOption(new Option('--dtype <dtype>', 'the stored element type').choices(Object.keys(CHECKPOINT_DTYPES)).default('fp32'))
    .option('--seed <n>', 'the random seed', '0')
    .requiredOption('-o, --out <dir>', 'the output directory')
    .action((options: { arch: CheckpointArch; size: CheckpointSize; dtype: CheckpointDtype; seed: string; out: string }) => {
      if (!/^\d+$/.test(options.seed)) throw invalidArgument('--seed', 'a non-negative integer', options.seed);
      makeDirectory(options.out, '--out');
      const config = makeCheckpoint({ arch: options.arch, size: options.size, seed: Number(options.seed), out: options.out, dtype: options.dtype });
      process.stdout.write(`wrote ${options.out}: ${String(config.model_type)} ${options.size}, seed ${options.seed}\n`);
    });
}
