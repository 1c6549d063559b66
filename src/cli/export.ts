/** `chorus export gguf`: a checkpoint as a GGUF file for llama.cpp and the programs built on it. */
import { Option, type Command } from 'commander';
import { exportGguf, GGUF_FILE_TYPES, type GgufFileType } from '../export/gguf/index.ts';

export function registerExport(program: Command): void {
  const command = program.command('export').description('write a checkpoint in another ecosystem\'s format');
  command
    .command('gguf')
    .description('write a decoder-only checkpoint (llama, qwen2, gpt2, llama2.c) as a GGUF file, tokenizer included, for llama.cpp')
    .argument('<source>', 'a Hugging Face checkpoint directory (config.json + safetensors) or a llama2.c .bin')
    .requiredOption('-o, --out <file>', 'the .gguf file to write')
    .addOption(new Option('--type <type>', 'the weights\' type (norms and biases stay f32)').choices([...GGUF_FILE_TYPES]).default('f16'))
    .option('--tokenizer <file>', 'a llama2.c tokenizer.bin, SentencePiece .model, tokenizer.json or vocab.json (default: the one beside or in the checkpoint)')
    .option('--name <name>', 'the model\'s name in the file (default: the checkpoint\'s)')
    .action((source: string, options: { out: string; type: GgufFileType; tokenizer?: string; name?: string }) => {
      const result = exportGguf({ source, out: options.out, type: options.type, tokenizer: options.tokenizer, name: options.name });
      const mib = (result.bytes / 2 ** 20).toFixed(1);
      process.stdout.write(`wrote ${result.out}: ${result.arch}, ${result.tensors} tensors, ${options.type}, ${mib} MiB, vocabulary of ${result.vocabSize} from ${result.tokenizer}\n`);
    });
}
