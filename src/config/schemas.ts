/**
 * Schemas of the repository's four definition kinds. They are the documentation: every field has a
 * description, and `docs/repository.md` is generated from them (`npm run docs`).
 */
import { Type, type SchemaOptions, type Static, type TSchema, type TUnsafe } from '@sinclair/typebox';
import { DATATYPES } from './datatypes.ts';

/** A string that must be one of `values` (a JSON Schema `enum`, so errors list them in one message). */
function Enum<const T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });
}

const Name = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]*$', expected: 'a name of letters, digits, _, . and -', description: 'A definition name: letters, digits, `_`, `.`, `-`.' });

const Source = Type.String({
  minLength: 1,
  description:
    'Where the files are: a local path (relative to the repository directory, or absolute), `hf:<org>/<name>[@<revision>]` for a Hugging Face model id, or `s3://<bucket>/<prefix>`. Remote sources are fetched into the cache directory on first load (`HF_TOKEN`, `HF_ENDPOINT`, `HF_HUB_OFFLINE`; the AWS environment and `AWS_ENDPOINT_URL_S3`).',
});

/** A `tokenizers/<name>.yaml` definition. */
export const TokenizerDefinition = Type.Object(
  {
    type: Enum(['huggingface', 'tiktoken', 'sentencepiece', 'llama2c'], {
      description:
        'The format: `huggingface` (tokenizer.json + tokenizer_config.json), `tiktoken` (an OpenAI BPE encoding or a .tiktoken file), `sentencepiece` (a .model file), `llama2c` (a llama2.c tokenizer.bin).',
    }),
    description: Type.Optional(Type.String({ description: 'What this tokenizer is, for people.' })),
    source: Type.Optional({ ...Source, description: `${Source.description} Required except for a bundled tiktoken encoding.` }),
    file: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'The file inside `source`. Default: `tokenizer.json` (huggingface); `tokenizer.model`, then `spiece.model` (sentencepiece); `tokenizer.bin` (llama2c); `<encoding>.tiktoken` (tiktoken with a source).',
      }),
    ),
    encoding: Type.Optional(
      Enum(
        ['gpt2', 'r50k_base', 'p50k_base', 'p50k_edit', 'cl100k_base', 'o200k_base'],
        { description: 'tiktoken only: a bundled encoding; with `source`, it gives the pattern and special tokens for the rank file.' },
      ),
    ),
    pattern: Type.Optional(Type.String({ minLength: 1, description: 'tiktoken only: the pre-tokenization regex of a .tiktoken file. Default: the encoding\'s.' })),
    special_tokens: Type.Optional(
      Type.Object(
        {
          bos: Type.Optional(Type.String({ description: 'Beginning-of-sequence token text.' })),
          eos: Type.Optional(Type.String({ description: 'End-of-sequence token text.' })),
          pad: Type.Optional(Type.String({ description: 'Padding token text.' })),
          unk: Type.Optional(Type.String({ description: 'Unknown token text.' })),
        },
        { additionalProperties: false, description: 'huggingface only: special tokens by text, overriding tokenizer_config.json.' },
      ),
    ),
    add_bos: Type.Optional(Type.Boolean({ description: 'sentencepiece and llama2c: put BOS before encoded text (Llama does). Default: false for sentencepiece (as SentencePiece itself), true for llama2c (as llama2.c).' })),
    add_eos: Type.Optional(Type.Boolean({ description: 'sentencepiece and llama2c: put EOS after encoded text (T5 does). Default: false.' })),
    chat_template: Type.Optional(Type.String({ minLength: 1, description: 'A Jinja chat template; wins over the one in tokenizer_config.json.' })),
    fallback: Type.Optional({
      ...Name,
      description:
        'Another tokenizer of the repository, used in this one\'s place, with a warning, when `source` is not in the cache and cannot be fetched. Its ids differ from the real vocabulary\'s: fit for a model on its random-weights `fallback` only.',
    }),
  },
  { additionalProperties: false },
);
export type TokenizerDefinition = Static<typeof TokenizerDefinition>;

const InstanceGroup = Type.Object(
  {
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'Sessions of the model on each device. Default: 1.' })),
    kind: Type.Optional(Enum(['cpu', 'gpu'], { description: 'Where the sessions run. Default: the model\'s device.' })),
    gpus: Type.Optional(Type.Array(Type.Integer({ minimum: 0 }), { minItems: 1, description: 'GPU indices (kind gpu). Default: [0].' })),
  },
  { additionalProperties: false },
);

const TensorSpec = Type.Object(
  {
    datatype: Enum(DATATYPES, { description: 'The KServe datatype.' }),
    dims: Type.Array(Type.Integer({ minimum: -1 }), { description: 'Shape without the batch dimension; -1 is any size.' }),
    optional: Type.Optional(Type.Boolean({ description: 'A request may leave it out. Default: false.' })),
    description: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
export type TensorSpec = Static<typeof TensorSpec>;

const OutputSpec = Type.Object(
  {
    ...TensorSpec.properties,
    tensor: Type.Optional(
      Type.String({
        minLength: 1,
        description: 'The graph tensor this output returns. Default: the tensor of the output\'s own name. Lets an output share its name with an input (FT\'s T5 takes and returns `sequence_length`).',
      }),
    ),
  },
  { additionalProperties: false },
);
export type OutputSpec = Static<typeof OutputSpec>;

/** A `models/<name>.yaml` definition. */
export const ModelDefinition = Type.Object(
  {
    engine: Enum(['generate', 'encode', 'forward'], {
      description: '`generate` (autoregressive decoding with a KV cache), `encode` (hidden states out), or `forward` (tensors in, tensors out).',
    }),
    description: Type.Optional(Type.String()),
    source: {
      ...Source,
      description:
        'The model: a directory in the Optimum layout (config.json, onnx/*.onnx), a checkpoint to build from, or an .onnx file. ' +
        'Checkpoints that build, by config.json `model_type`: `gpt2`; `llama` (Llama 2, Llama 3.x with `rope_scaling` of type `llama3`, SmolLM; tied or untied head), `qwen2` (q/k/v biases), `qwen3` (per-head q/k RMSNorm), ' +
        '`mistral` (sliding-window attention), `phi3` (the 4k Phi-3 models: fused qkv and gate/up projections, sliding window; the 128k ones and Phi-3.5-mini scale with `longrope`, which is refused), ' +
        '`gemma2` (GeGLU, four norms a layer, soft-capped attention and logits, alternating sliding-window layers); `t5`, `mt5`; `bart`, `mbart`; and llama2.c `.bin` files. ' +
        `Any other \`model_type\` or rotary scaling type fails the build, naming it and what is supported. ${Source.description}`,
    },
    file: Type.Optional(Type.String({ minLength: 1, description: 'A file inside `source` that is the model (a llama2.c .bin, or a checkpoint subdirectory). Default: `source` itself.' })),
    tokenizer: Type.Optional({ ...Name, description: 'The tokenizer definition that matches this model\'s vocabulary.' }),
    device: Type.Optional(Type.String({ pattern: '^(cpu|cuda(:[0-9]+)?)$', expected: 'cpu, cuda or cuda:N', description: '`cpu`, `cuda` or `cuda:N`. Default: cpu.' })),
    dtype: Type.Optional(
      Enum(['fp32', 'fp16', 'bf16'], {
        description: 'Weights and activations. bf16 (what Llama 3, Qwen and Gemma are trained in; fp16 can overflow on them) runs on GPUs, on the native engine; the CPU runs fp32. Default: fp32.',
      }),
    ),
    weights: Type.Optional(
      Enum(['checkpoint', 'int8', 'int4'], {
        description:
          'Decoder-only checkpoints that Chorus builds: the projections\' weights as the checkpoint stores them (`checkpoint`: float, or a GPTQ / AWQ checkpoint\'s 4-bit packing), or quantized by the build to `int8` (per output channel, with the LM head) or `int4` (round to nearest in groups of `group_size`, LM head kept float), run by ONNX Runtime\'s MatMulNBits; `dtype` stays the activations\' type. Default: checkpoint.',
      }),
    ),
    group_size: Type.Optional(
      Type.Unsafe<16 | 32 | 64 | 128 | 256>({ type: 'integer', enum: [16, 32, 64, 128, 256], description: 'weights int4: values per scale (16, 32, 64, 128 or 256). Default: 128 (32 suits models as small as stories260K).' }),
    ),
    flavor: Type.Optional(
      Enum(['portable', 'cuda'], {
        description: 'Decoder-only checkpoints that Chorus builds: `portable` (standard ONNX operators) or `cuda` (ONNX Runtime\'s fused contrib operators). Default: cuda when the model runs on a GPU, else portable.',
      }),
    ),
    greedy_search: Type.Optional(
      Type.Boolean({
        description:
          'generate, decoder-only: run requests that are not streamed and decode greedily without processors through ONNX Runtime\'s GreedySearch operator, the whole decode loop in one session run (built with the model when Chorus builds it; used when a built directory holds onnx/decoder_model_greedy.onnx). Their tokens come together when the batch ends. It keeps a second copy of the weights in memory. Default: true when the model runs on a GPU (where it measured 3.6-5.5x the step loop on GPT-2), else false.',
      }),
    ),
    native_engine: Type.Optional(
      Type.Boolean({
        description:
          'generate, decoder-only: run on the native engine (`npm run build:native`), whose cache stays on the device and whose decode steps replay as CUDA graphs on GPUs; the model is then built with its slot decoder (cuda flavor). true: required (loading fails, saying why, without it); false: the TypeScript engine. Default: true when the native engine is built (npm install builds it for the CPU), on CPUs and GPUs alike (on the CPU, unless greedy_search: true), else false; a model whose build cannot run on it (an encoder-decoder, flavor: portable) falls back to the TypeScript engine with a one-line notice.',
      }),
    ),
    output_attentions: Type.Optional(
      Type.Boolean({
        description:
          'encode: build the encoder to also give each layer\'s attention probabilities, which a request then asks for with is_return_attentions (FT\'s T5 encoder). Applies when Chorus builds the model from a checkpoint. Default: false.',
      }),
    ),
    cuda_graph: Type.Optional(Type.Boolean({ description: 'The native engine on GPUs: replay each batch size\'s decode step as a captured CUDA graph. Default: true.' })),
    continuous_core: Type.Optional(
      Type.Boolean({
        description:
          'The native engine, decoder-only with a cache of slots: run requests on the addon\'s continuous core, a thread that steps the model back to back, admitting and retiring requests between steps and handing each step\'s tokens to the server in one message, so that no step waits on the event loop. Beam searches, bad_words, factual-nucleus sampling (top_p_decay) and models that force tokens run on the step loop, after the core\'s requests drain. Default: true on a GPU, false on the CPU.',
      }),
    ),
    batch_invariant: Type.Optional(
      Type.Boolean({
        description:
          'The native engine: a request\'s tokens do not depend on what shares its steps. Every decode step runs max_batch_size rows (free slots padded) and encoder-decoders encode each source alone; in fp16 on GPUs a matrix product otherwise rounds by how many rows it has, which moves near-ties. Costs the whole batch\'s step when few requests run. Default: false.',
      }),
    ),
    paged_cache: Type.Optional(
      Type.Unsafe<boolean | 'auto'>({
        enum: [true, false, 'auto'],
        description:
          'The native engine, decoder-only models built with the paged decoder: hold the cache in blocks that requests take as they grow (true), or in whole slots of max_sequence_length (false). auto (the default) takes the slots when max_batch_size whole slots fit beside the weights, the blocks otherwise, and the blocks for a tensor_parallel model and, on GPUs, for an fp32 model with rotary positions (whose slot attention would run on the CPU). The continuous core runs a cache of slots only.',
      }),
    ),
    gpu_memory_utilization: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: 1,
        description:
          'The native engine on GPUs: the share of the GPU\'s memory that the model\'s weights, activations and cache may take together, as vLLM has it. The cache gets what is left after the weights and activations; decoder-only models built with the paged decoder then hold it in blocks that requests take as they grow (the load logs how many tokens of cache there are). Default: 0.9.',
      }),
    ),
    cuda_options: Type.Optional(
      Type.Record(Type.String({ pattern: '^[a-z_]+$' }), Type.Union([Type.String(), Type.Number()]), {
        description: 'The native engine on GPUs: ONNX Runtime\'s CUDA execution provider options by their names (gpu_mem_limit, arena_extend_strategy, cudnn_conv_algo_search, ...).',
      }),
    ),
    tensor_parallel: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'generate, decoder-only on the native engine: split the model over this many GPUs of one host (Megatron-style: attention heads, MLP and vocabulary split, an all-reduce after attention and MLP), so a model larger than one GPU serves. Built with each rank\'s slot and paged decoders; not with quantized weights or greedy_search. Default: 1.',
      }),
    ),
    end_ids: Type.Optional(
      Type.Array(Type.Integer({ minimum: 0 }), {
        minItems: 1,
        maxItems: 64,
        description:
          'generate: the ids generation ends at (any of them, whichever comes first), in place of the model\'s: `eos_token_id` of its generation_config.json, else of its config.json, one id or a list, as transformers reads them. A request\'s `end_id` still replaces them. Default: the model\'s.',
      }),
    ),
    max_batch_size: Type.Optional(Type.Integer({ minimum: 1, maximum: 4096, description: 'Most sequences in one batch. Default: 8.' })),
    max_queue: Type.Optional(Type.Integer({ minimum: 0, description: 'generate: most requests waiting to join the batch; beyond it a request is refused (HTTP 503, 429 on OpenAI routes, with Retry-After). Default: 1024.' })),
    max_sequence_length: Type.Optional(Type.Integer({ minimum: 1, description: 'Prompt plus output tokens, at most. Default: the model config\'s context length.' })),
    instance_group: Type.Optional(Type.Array(InstanceGroup, { minItems: 1, description: 'Sessions of this model and where they run.' })),
    dynamic_batching: Type.Optional(
      Type.Object(
        {
          preferred_batch_size: Type.Optional(Type.Array(Type.Integer({ minimum: 1 }), { minItems: 1 })),
          max_queue_delay_microseconds: Type.Optional(Type.Integer({ minimum: 0 })),
        },
        { additionalProperties: false, description: 'encode and forward: gather requests into batches as Triton does.' },
      ),
    ),
    fallback: Type.Optional(
      Type.Object(
        {
          arch: Enum(['gpt2', 'llama', 'qwen2', 't5', 't5v1_1', 'ul2', 'bart', 'mbart', 'llama3', 'qwen3', 'mistral', 'phi3', 'gemma2'], { description: 'The architecture (as `chorus make-checkpoint --arch`; `llama3`, `qwen3`, `mistral`, `phi3` and `gemma2` write each family\'s config.json and tensor names).' }),
          size: Enum(['tiny', 'real', 'base', 'large'], { description: '`real` is the released model\'s shape; `tiny` a few layers of width 64.' }),
          seed: Type.Integer({ minimum: 0, description: 'The seed of the random weights.' }),
        },
        {
          additionalProperties: false,
          description:
            'When `source` is a Hugging Face id that is not in the cache: serve seeded random weights of this architecture instead (with a warning), so the repository loads and answers offline. The text is noise; the plumbing is real.',
        },
      ),
    ),
    inputs: Type.Optional(Type.Record(Type.String(), TensorSpec, { description: 'forward: the model\'s input tensors.' })),
    outputs: Type.Optional(Type.Record(Type.String(), TensorSpec, { description: 'forward: the model\'s output tensors.' })),
  },
  { additionalProperties: false },
);
export type ModelDefinition = Static<typeof ModelDefinition>;

/** The step kinds of an ensemble; each step names exactly one. */
export const STEP_KINDS = ['tokenize', 'generate', 'encode', 'forward', 'detokenize', 'script'] as const;
export type StepKind = (typeof STEP_KINDS)[number];

const TensorMap = Type.Record(Type.String({ minLength: 1 }), Type.String({ minLength: 1 }));

const Step = Type.Object(
  {
    name: { ...Name, description: 'The step\'s name, unique in the ensemble; errors carry it.' },
    tokenize: Type.Optional({ ...Name, description: 'Tokenize with this tokenizer.' }),
    generate: Type.Optional({ ...Name, description: 'Generate with this model (engine generate).' }),
    encode: Type.Optional({ ...Name, description: 'Encode with this model (engine encode).' }),
    forward: Type.Optional({ ...Name, description: 'Run this model (engine forward).' }),
    detokenize: Type.Optional({ ...Name, description: 'Detokenize with this tokenizer.' }),
    script: Type.Optional(Type.String({ minLength: 1, description: 'A TS/JS module (path relative to the repository) whose default export maps tensors to tensors.' })),
    inputs: { ...TensorMap, description: 'The step\'s port -> the tensor that feeds it.' },
    outputs: { ...TensorMap, description: 'The step\'s port -> the tensor it produces.' },
  },
  { additionalProperties: false },
);

/** An `ensembles/<name>.yaml` definition. */
export const EnsembleDefinition = Type.Object(
  {
    description: Type.Optional(Type.String()),
    inputs: Type.Record(Type.String({ minLength: 1 }), TensorSpec, { description: 'The ensemble\'s input tensors.' }),
    outputs: Type.Record(Type.String({ minLength: 1 }), OutputSpec, { description: 'The ensemble\'s output tensors.' }),
    steps: Type.Array(Step, { minItems: 1, description: 'The steps; order does not matter, wiring does.' }),
  },
  { additionalProperties: false },
);
export type EnsembleDefinition = Static<typeof EnsembleDefinition>;
export type StepDefinition = Static<typeof Step>;

/** A `pipelines/<name>.yaml` definition. */
export const PipelineDefinition = Type.Object(
  {
    description: Type.Optional(Type.String()),
    ensemble: Type.Optional({ ...Name, description: 'The ensemble this pipeline runs.' }),
    model: Type.Optional({ ...Name, description: 'Shortcut instead of `ensemble`: tokenize -> generate with this model -> detokenize.' }),
    tokenizer: Type.Optional({ ...Name, description: 'With `model`: the tokenizer. Default: the model\'s.' }),
    fields: Type.Optional(Type.Record(Type.String({ minLength: 1 }), Type.String({ minLength: 1 }), { description: 'Request field -> ensemble input tensor.' })),
    defaults: Type.Optional(Type.Record(Type.String({ minLength: 1 }), Type.Unknown(), { description: 'Request field -> value used when a request leaves it out.' })),
    chat_template: Type.Optional(Type.String({ minLength: 1, description: '`tokenizer` (the tokenizer\'s template) or an inline Jinja template.' })),
    text_output: Type.Optional(Type.String({ minLength: 1, description: 'Ensemble pipelines: the output tensor holding the text. Default: `text_output`, else the ensemble\'s one BYTES output.' })),
  },
  { additionalProperties: false },
);
export type PipelineDefinition = Static<typeof PipelineDefinition>;

/** The four kinds, by the folder that holds them. */
export const KINDS = {
  tokenizer: { folder: 'tokenizers', schema: TokenizerDefinition },
  model: { folder: 'models', schema: ModelDefinition },
  ensemble: { folder: 'ensembles', schema: EnsembleDefinition },
  pipeline: { folder: 'pipelines', schema: PipelineDefinition },
} as const satisfies Record<string, { folder: string; schema: TSchema }>;
export type Kind = keyof typeof KINDS;
