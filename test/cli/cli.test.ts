import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildModel } from '../../src/modelbuild/index.ts';
import { Seq2SeqSession } from '../../src/runtime/index.ts';
import { Llama2cTokenizer } from '../../src/tokenizers/index.ts';
import { ROOT, STORIES, TOKENIZERS } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';

const env = { ...process.env, CHORUS_CACHE: scratchDir('chorus-cache-'), HF_HUB_OFFLINE: '1' };

/** Runs `chorus` as a user would, through bin/chorus.js. */
function chorus(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [join(ROOT, 'bin/chorus.js'), ...args], { encoding: 'utf8', env, cwd: ROOT });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('chorus tokenize --tokenizer gpt2 --ids "Hello world" prints 15496 995', () => {
  assert.deepEqual(chorus('tokenize', '--tokenizer', 'gpt2', '--ids', 'Hello world'), { status: 0, stdout: '15496 995\n', stderr: '' });
});

test('chorus tokenize with T5\'s tokenizer.json and spiece.model', () => {
  const prompt = 'translate English to German: The house is wonderful.';
  assert.equal(chorus('tokenize', '-t', `${TOKENIZERS}/t5/tokenizer.json`, '--ids', prompt).stdout, '13959 1566 12 2968 10 37 629 19 1627 5 1\n');
  assert.equal(chorus('tokenize', '-t', `${TOKENIZERS}/t5/spiece.model`, '--ids', prompt).stdout, '13959 1566 12 2968 10 37 629 19 1627 5\n');
});

test('chorus tokenize with a llama2.c tokenizer.bin, and without --ids shows each token\'s text', () => {
  assert.equal(chorus('tokenize', '-t', `${STORIES}/tok512.bin`, '--ids', 'Once upon a time').stdout, '1 403 407 261 378\n');
  assert.equal(chorus('tokenize', '-t', 'gpt2', 'Hi there').stdout, '17250\t"Hi"\n612\t" there"\n');
  assert.equal(chorus('tokenize', '-t', `${STORIES}/tok512.bin`, '--no-special', '--ids', 'Once').stdout, '403\n');
});

test('chorus detokenize prints the text, with or without special tokens', () => {
  assert.equal(chorus('detokenize', '-t', 'gpt2', '15496', '995', '50256').stdout, 'Hello world<|endoftext|>\n');
  assert.equal(chorus('detokenize', '-t', 'gpt2', '--skip-special', '15496', '995', '50256').stdout, 'Hello world\n');
});

test('bad input gets a clear error and a non-zero exit', () => {
  const unknown = chorus('tokenize', '-t', 'gpt3', 'x');
  assert.equal(unknown.status, 1);
  assert.match(unknown.stderr, /--tokenizer gpt3 is neither a tokenizer of .* \(bart, gemma2, gpt2, llama2, llama3, mistral, phi3, qwen3, stories-tokenizer, t5\) nor an existing path/);
  const notId = chorus('detokenize', '-t', 'gpt2', '12', 'abc');
  assert.equal(notId.status, 1);
  assert.match(notId.stderr, /ids\[1\] must be a non-negative integer, got "abc"/);
  const outOfRange = chorus('detokenize', '-t', 'gpt2', '99999');
  assert.match(outOfRange.stderr, /ids\[0\] must be a token id, an integer in \[0, 50256\], got 99999/);
  const uncached = chorus('tokenize', '-t', 'llama2', 'x');
  assert.equal(uncached.status, 1);
  assert.match(uncached.stderr, /tokenizer llama2: meta-llama\/Llama-2-7b-hf is not in the cache/);
  const missingArgument = chorus('tokenize', 'x');
  assert.equal(missingArgument.status, 1);
  assert.equal(missingArgument.stderr, "error: required option '-t, --tokenizer <name|path>' not specified\n(add --help for usage)\n");
  // What the system refuses is one line too, and flags that cannot go together are refused.
  const noDirectory = chorus('infer', '--ensemble', 'gpt', '--input', 'x=1', '--url', 'http://127.0.0.1:1');
  assert.equal(noDirectory.stderr, 'chorus: --url must be given with --request (--ensemble runs in process), got "http://127.0.0.1:1"\n');
  assert.equal(chorus('serve', '--api-key', ' ', '--port', '0').stderr, 'chorus: --api-key must be a key that is not empty (or leave it and CHORUS_API_KEY out), got " "\n');
  assert.equal(chorus('serve', '--port', '8123', '--grpc-port', '8123').stderr, 'chorus: --grpc-port must be a port other than --port (8123), got "8123"\n');
  assert.equal(chorus('serve', '--http-threads', '0').stderr, 'chorus: --http-threads must be auto or an integer in [1, 64], got "0"\n');
  // Where results go is checked before a run that could take minutes to lose.
  assert.equal(chorus('bench', '--pipeline', 'stories', '--url', 'http://127.0.0.1:1', '--out', '/proc/chorus-results.json').stderr, 'chorus: --out /proc/chorus-results.json cannot be written (ENOENT)\n');
  assert.match(chorus('doctor', '--model', '/nonexistent').stderr, /^chorus: --model \/nonexistent does not exist\n$/);
  assert.match(chorus('validate', join(ROOT, 'package.json')).stdout + chorus('validate', join(ROOT, 'package.json')).stderr, /the repository is a file, not a directory/);
});

test('chorus validate exits 1 and prints file:line:column for a broken repository, 0 for the bundled one', () => {
  const broken = chorus('validate', 'test/fixtures/repositories/broken');
  assert.equal(broken.status, 1);
  assert.match(broken.stdout, /^test\/fixtures\/repositories\/broken\/tokenizers\/typo\.yaml:2:1: error: unknown field "encodng"/m);
  assert.match(broken.stdout, /; 41 errors, 4 warnings\n$/);
  const bundled = chorus('validate');
  assert.equal(bundled.status, 0);
  assert.match(
    bundled.stdout,
    /repository \.: 10 tokenizers \(bart, gemma2, gpt2, llama2, llama3, mistral, phi3, qwen3, stories-tokenizer, t5\), 10 models \(bart-large-cnn, gemma-2-2b, gpt2, llama-3\.2-1b, mistral-7b, phi-3-mini, qwen3-1\.7b, stories, t5-encoder, t5-small\), 6 ensembles \(bart-fastertransformer, fastertransformer, gpt, t5-encoder-fastertransformer, t5-encoder, t5-fastertransformer\), 10 pipelines \(bart, gemma2, gpt, gpt2, llama3, mistral, phi3, qwen3, stories, t5\); 0 errors, 17 warnings\n$/,
  );
  // Without their Hugging Face files, the models warn that their fallback weights will be served.
  assert.match(bundled.stdout, /models\/gpt2\.yaml:\d+:\d+: warning: openai-community\/gpt2 is not in the cache .*; until then its fallback \(seeded random weights\) is served/);
  assert.match(bundled.stdout, /tokenizers\/bart\.yaml:\d+:\d+: warning: facebook\/bart-large-cnn is not in the cache .*; until then tokenizer gpt2 serves in its place/);
});

test('--help is there for every command', () => {
  for (const command of [[], ['validate'], ['tokenize'], ['detokenize'], ['generate'], ['infer'], ['build']]) {
    const help = chorus(...command, '--help');
    assert.equal(help.status, 0, command.join(' '));
    assert.match(help.stdout, /^Usage: chorus/);
  }
});

test('chorus generate on stories260K.bin (built on the fly) prints the documented story', () => {
  const out = chorus('generate', '--model', `${STORIES}/stories260K.bin`, '--tokenizer', `${STORIES}/tok512.bin`, '--max-tokens', '60', '--temperature', '0', '');
  assert.equal(out.status, 0, out.stderr);
  assert.ok(out.stdout.startsWith('Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'), out.stdout);
  const ids = chorus('generate', '-m', `${STORIES}/stories260K.bin`, '--max-tokens', '4', '--temperature', '0', '--ids', '');
  assert.equal(ids.stdout, '403 407 261 378\n');
  // Beam search prints its best sequences one per line, best first.
  const beams = chorus('generate', '-m', `${STORIES}/stories260K.bin`, '--max-tokens', '30', '--beam-width', '4', '--num-return', '3', '');
  const lines = beams.stdout.split('\n').filter((line) => line !== '');
  assert.equal(lines.length, 3, beams.stdout);
  assert.equal(new Set(lines).size, 3);
  for (const line of lines) assert.ok(line.startsWith('Once upon a time, there was a little girl named Lily.'), line);
  // Streaming prints the same text as it comes; a seed makes sampling repeatable.
  const args = ['generate', '-m', `${STORIES}/stories260K.bin`, '--max-tokens', '20', '--temperature', '0.8', '--seed', '7'];
  const streamed = chorus(...args, '--stream', 'Once upon a time');
  assert.equal(streamed.stdout, chorus(...args, 'Once upon a time').stdout);
  assert.notEqual(streamed.stdout, chorus(...args.slice(0, -1), '8', 'Once upon a time').stdout);
});

test('chorus generate refuses what it cannot do, saying why', () => {
  const beam = chorus('generate', '-m', `${STORIES}/stories260K.bin`, '--beam-width', '4', '--top-k', '40', 'x');
  assert.equal(beam.status, 1);
  // Errors name the flags the user gave, not the engine's parameters.
  assert.match(beam.stderr, /^chorus: --top-k 40 has no effect with beam_width 4/);
  assert.match(chorus('generate', '-m', `${STORIES}/stories260K.bin`, '--max-tokens', '0', 'x').stderr, /^chorus: --max-tokens must be an integer in \[1, 2\^53\], got 0\n$/);
  assert.match(chorus('generate', '-m', `${STORIES}/stories260K.bin`, '--temperature', 'hot', 'x').stderr, /--temperature must be a number, got "hot"/);
  assert.match(chorus('generate', '-m', '/nonexistent', 'x').stderr, /--model \/nonexistent does not exist/);
});

test('chorus generate runs an encoder-decoder checkpoint: its ids are the greedy step loop\'s', async () => {
  const dir = scratchDir('chorus-cli-s2s-');
  assert.equal(chorus('make-checkpoint', '--arch', 't5v1_1', '--size', 'tiny', '--seed', '3', '-o', join(dir, 'ckpt')).status, 0);
  const out = chorus('generate', '-m', join(dir, 'ckpt'), '--tokenizer', `${STORIES}/tok512.bin`, '--max-tokens', '6', '--temperature', '0', '--ids', 'Once upon a time');
  assert.equal(out.status, 0, out.stderr);
  buildModel({ source: join(dir, 'ckpt'), out: join(dir, 'onnx') });
  const session = await Seq2SeqSession.open(join(dir, 'onnx'));
  const prompt = Llama2cTokenizer.load(`${STORIES}/tok512.bin`).encode('Once upon a time');
  const expected = await session.greedy(prompt, 6);
  await session.close();
  // The engine stops at the model's eos (id 1) if greedy reaches it; the step loop does not stop.
  const stop = expected.indexOf(1);
  assert.equal(out.stdout, `${(stop >= 0 ? expected.slice(0, stop + 1) : expected).join(' ')}\n`);
});

test('chorus generate --pipeline stories, pointed at the real model with --set-source, tells the story', () => {
  const out = chorus('generate', '--pipeline', 'stories', '--set-source', `stories=${STORIES}/stories260K.bin`, '--set-source', `stories-tokenizer=${STORIES}/tok512.bin`, '--temperature', '0', '--max-tokens', '60', '');
  assert.equal(out.status, 0, out.stderr);
  assert.ok(out.stdout.startsWith('Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'), out.stdout);
  const streamed = chorus('generate', '--pipeline', 'stories', '--set-source', `stories=${STORIES}/stories260K.bin`, '--temperature', '0', '--max-tokens', '60', '--stream', '');
  assert.equal(streamed.stdout, out.stdout);
  const bad = chorus('generate', '--pipeline', 'nope', 'x');
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /no pipeline named nope; there are: bart, gemma2, gpt, gpt2, llama3, mistral, phi3, qwen3, stories, t5/);
  assert.match(chorus('generate', 'x').stderr, /give --model <path> or --pipeline <name>, one of them/);
});

test('chorus infer runs an ensemble on JSON inputs and prints its outputs', () => {
  const out = chorus('infer', '--ensemble', 'gpt', '--input', 'INPUT_0="Hello"', '--input', 'INPUT_1=3', '--input', 'runtime_top_k=1');
  assert.equal(out.status, 0, out.stderr);
  const outputs = JSON.parse(out.stdout) as Record<string, { data: unknown[] }>;
  assert.ok((outputs.OUTPUT_0!.data[0] as string).startsWith('Hello'));
  assert.deepEqual(outputs.sequence_length!.data, [4]);
  assert.match(chorus('infer', '--ensemble', 'gpt', '--input', 'INPUT_9=1').stderr, /ensemble gpt has no input INPUT_9; its inputs are: INPUT_0, INPUT_1/);
  assert.match(chorus('infer', '--ensemble', 'gpt', '--input', 'INPUT_0="x"').stderr, /input INPUT_1 is required by ensemble gpt/);
  assert.match(chorus('validate', '--set-source', 'stories=/nowhere.bin').stdout, /models\/stories\.yaml:\d+:\d+: error: source path \/nowhere\.bin does not exist/);
});

test('chorus setup cuda on a machine without a GPU says so and exits 1; doctor reports the facts', () => {
  const setup = chorus('setup', 'cuda');
  assert.equal(setup.status, 1);
  assert.match(setup.stdout, /MISSING NVIDIA GPU: no NVIDIA GPU found \(looked at \/proc\/driver\/nvidia\/version and nvidia-smi -L\)/);
  assert.match(setup.stdout, /No GPU, so no CUDA: Chorus runs on the CPU/);
  const doctor = chorus('doctor');
  assert.equal(doctor.status, 0);
  assert.match(doctor.stdout, /^node v\d+/);
  assert.match(doctor.stdout, /onnxruntime-node 1\.29\.0/);
  assert.match(doctor.stdout, /CUDA provider for onnxruntime-node 1\.29\.0/);
});
