/**
 * tokenize: text (BYTES, one string per batch row; add_special_tokens, default true) -> input_ids [batch, longest] (padded with the
 * tokenizer's pad id, else its eos, else 0) and input_lengths [batch, 1]; FT's bad_words / stop_words CSV
 * strings -> bad_words_list / stop_words_list in FT's [batch, 2, L] layout.
 */
import { toWordList } from '../../tokenizers/index.ts';
import { padded, perRow, type Tensor } from '../tensor.ts';
import { onFinalInputs, type TensorRecord } from './step.ts';
import { texts } from './texts.ts';

export const tokenizeStep = onFinalInputs(async (inputs, context) => {
  const tokenizer = await context.store.tokenizer(context.target);
  const prompts = texts(inputs.text!, 'text');
  // A chat template writes the special tokens itself.
  const addSpecialTokens = inputs.add_special_tokens === undefined ? true : perRow<boolean>(inputs.add_special_tokens, 1, 'add_special_tokens')[0]!;
  const ids = prompts.map((text) => tokenizer.encode(text, { addSpecialTokens }));
  const pad = tokenizer.specialTokens.pad ?? tokenizer.specialTokens.eos ?? 0;
  const out: TensorRecord = {
    input_ids: padded('UINT32', ids, pad),
    input_lengths: { datatype: 'UINT32', shape: [ids.length, 1], data: ids.map((row) => row.length) },
  };
  for (const [port, list] of [['bad_words', 'bad_words_list'], ['stop_words', 'stop_words_list']] as const) {
    const words = inputs[port];
    if (words === undefined) continue;
    const csv = texts(words, port);
    const wordList = toWordList(tokenizer, csv.length === 1 && prompts.length > 1 ? prompts.map(() => csv[0]!) : csv);
    out[list] = { datatype: 'INT32', shape: [...wordList.dims], data: [...wordList.data] } satisfies Tensor;
  }
  return out;
});
