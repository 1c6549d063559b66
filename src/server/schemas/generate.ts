/**
 * The body of Triton's generate extension (`/generate`, `/generate_stream`): an optional `id`, the
 * request's fields, and more of them in `parameters`. For a pipeline the fields are its request fields
 * (the standard ones checked here, with vLLM's bounds; others the pipeline itself maps or refuses); for
 * an ensemble they are its inputs by name, checked against its tensors.
 */
import { Type, type Static } from '@sinclair/typebox';
import { integer, nullable, samplingFields } from './fields.ts';

const fields = {
  text_input: Type.Optional(Type.String({ expected: 'a string (or give messages)' })),
  n: nullable(integer(1, 64, 'an integer in [1, 64]')),
  logprobs: nullable(Type.Boolean({ expected: 'true or false' })),
  top_logprobs: nullable(integer(0, 20, 'an integer in [0, 20]')),
  ...samplingFields(),
};

/** A pipeline's standard request fields alone, as KServe infer gives them (one-element tensors by name). */
export const PipelineFields = Type.Object(fields, { expected: 'a pipeline\'s request fields' });

/** generate answers one text_output (n samples come from the OpenAI routes), streamed or not by its route. */
const generateFields = {
  ...fields,
  n: nullable(integer(1, 1, '1 (generate answers one text; /v1/completions answers n)')),
  stream: nullable(Type.Boolean({ expected: 'false on generate and true on generate_stream (or left out)' })),
};

export const GenerateBody = Type.Object(
  {
    id: Type.Optional(Type.String({ expected: 'a string' })),
    parameters: Type.Optional(Type.Object(generateFields, { expected: 'an object of fields' })),
    ...generateFields,
  },
  { expected: 'a JSON object' },
);

export type GenerateBody = Static<typeof GenerateBody>;
