/**
 * detokenize: output_ids [batch, n, L] (or [batch, L]) -> text [batch, n], special tokens skipped, each
 * sequence cut at its sequence_length. With input_lengths, each row's first input_lengths ids are the
 * prompt: not in the text, but the context it continues (so a SentencePiece piece keeps its space).
 * Streaming: every snapshot of output_ids gives a text snapshot that extends the last one (pieces that
 * might be half a character wait), and the final one is decode() of the whole. Ids past the tokenizer's
 * vocabulary are skipped.
 */
import type { Observable} from 'rxjs';
import { concat, defer, from, mergeMap, of } from 'rxjs';
import { StreamDecoder, type Tokenizer } from '../../tokenizers/index.ts';
import { numbers, perRow } from '../tensor.ts';
import type { StepImpl, TensorRecord } from './step.ts';

export const detokenizeStep: StepImpl = (inputs, context) =>
  from(context.store.tokenizer(context.target)).pipe(mergeMap((tokenizer) => texts(inputs, tokenizer)));

function texts(inputs: Observable<TensorRecord>, tokenizer: Tokenizer): Observable<TensorRecord> {
  return defer(() => {
    const decoders = new Map<number, { decoder: StreamDecoder; pushed: number; text: string }>();
    let shape: [number, number] = [0, 0];
    let started = false;
    const snapshot = (): TensorRecord => {
      const data: string[] = [];
      for (let i = 0; i < shape[0] * shape[1]; i++) data.push(decoders.get(i)?.text ?? '');
      return { text: { datatype: 'BYTES', shape: [...shape], data } };
    };
    const step = (record: TensorRecord): TensorRecord[] => {
      const ids = record.output_ids;
      if (ids === undefined) return [];
      const batch = ids.shape[0] ?? 1;
      const sequences = ids.shape.length === 3 ? ids.shape[1]! : 1;
      const width = ids.shape.at(-1) ?? 0;
      shape = [batch, sequences];
      const all = numbers(ids, 'output_ids');
      const lengths = record.sequence_length === undefined ? undefined : numbers(record.sequence_length, 'sequence_length');
      const skip = record.input_lengths === undefined ? undefined : perRow<number>(record.input_lengths, batch, 'input_lengths');
      for (let i = 0; i < batch * sequences; i++) {
        const row = all.slice(i * width, (i + 1) * width);
        const end = Math.min(width, lengths?.[i] ?? width);
        const prompt = skip?.[Math.floor(i / sequences)] ?? 0;
        let state = decoders.get(i);
        if (state === undefined) {
          state = { decoder: new StreamDecoder(tokenizer, { skipSpecialTokens: true, context: row.slice(0, prompt) }), pushed: prompt, text: '' };
          decoders.set(i, state);
        }
        // Ids past the tokenizer's vocabulary (a model's embedding padded beyond it, as t5-small's 32128
        // rows over T5's 32000 pieces) have no text.
        for (; state.pushed < end; state.pushed++) if (row[state.pushed]! < tokenizer.vocabSize) state.text += state.decoder.push(row[state.pushed]!);
      }
      started = true;
      return [snapshot()];
    };
    const flush = (): TensorRecord[] => {
      if (!started) return [];
      for (const state of decoders.values()) state.text += state.decoder.flush();
      return [snapshot()];
    };
    return concat(inputs.pipe(mergeMap((record) => of(...step(record)))), defer(() => of(...flush())));
  });
}
