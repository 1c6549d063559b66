/**
 * Opens a built decoder's GreedySearch model (onnx/decoder_model_greedy.onnx, `chorus build
 * --greedy-search`) and runs whole greedy decodes: every step of a batch inside one session run, the
 * key/value cache never leaving the device.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { ChorusError } from '../errors.ts';
import { GREEDY_MODEL, GREEDY_PAD_ID } from '../modelbuild/greedy-layout.ts';
import { createSession, releaseSession, type ExecutionProviders } from './sessions.ts';

/** ONNX Runtime's limit on max_length. */
const MAX_LENGTH = 16384;

export class GreedySearchSession {
  private constructor(
    private readonly session: ort.InferenceSession,
    /** The end id the model stops at (-1: none), from chorus_build.json. */
    readonly endId: number,
  ) {}

  /** The directory's GreedySearch model, or undefined when it was built without one. */
  static async open(dir: string, options: { executionProviders?: ExecutionProviders } = {}): Promise<GreedySearchSession | undefined> {
    const file = join(dir, 'onnx', GREEDY_MODEL);
    if (!existsSync(file)) return undefined;
    const info = join(dir, 'chorus_build.json');
    const endId = existsSync(info) ? (JSON.parse(readFileSync(info, 'utf8')) as { greedySearch?: { eosTokenId?: unknown } }).greedySearch?.eosTokenId : undefined;
    if (typeof endId !== 'number') throw new ChorusError('CHORUS_FILE_INVALID', `${dir}: chorus_build.json does not say which end id ${GREEDY_MODEL} stops at; rebuild it with chorus build --greedy-search`);
    return new GreedySearchSession(await createSession(file, { executionProviders: options.executionProviders ?? ['cpu'] }), endId);
  }

  /**
   * Greedy decoding of each prompt for `newTokens` tokens at most, as one left-padded batch: each row's
   * generated ids, up to and including the end id where the model generated it. (The operator writes
   * the pad id where a row generated its end id, and after it.)
   */
  async run(prompts: readonly (readonly number[])[], newTokens: number): Promise<number[][]> {
    const batch = prompts.length;
    const length = Math.max(...prompts.map((p) => p.length));
    if (batch === 0 || length === 0 || prompts.some((p) => p.length === 0)) throw new ChorusError('CHORUS_INVALID_ARGUMENT', 'prompts must be a non-empty batch of non-empty prompts');
    if (!Number.isInteger(newTokens) || newTokens < 1 || length + newTokens > MAX_LENGTH) {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `newTokens must be an integer in [1, ${MAX_LENGTH - length}] (prompt of ${length} tokens), got ${newTokens}`);
    }
    const ids = new Int32Array(batch * length).fill(GREEDY_PAD_ID);
    const mask = new Int32Array(batch * length);
    prompts.forEach((prompt, b) => {
      const offset = b * length + length - prompt.length;
      ids.set(prompt, offset);
      mask.fill(1, offset, (b + 1) * length);
    });
    const out = await this.session.run({
      input_ids: new ort.Tensor('int32', ids, [batch, length]),
      max_length: new ort.Tensor('int32', Int32Array.of(length + newTokens), [1]),
      min_length: new ort.Tensor('int32', Int32Array.of(0), [1]),
      repetition_penalty: new ort.Tensor('float32', Float32Array.of(1), [1]),
      attention_mask: new ort.Tensor('int32', mask, [batch, length]),
    });
    const sequences = out.sequences!;
    const width = sequences.dims[1]!;
    const data = sequences.data as Int32Array;
    return prompts.map((_, b) => {
      const row = Array.from(data.subarray(b * width + length, (b + 1) * width));
      const end = row.indexOf(GREEDY_PAD_ID);
      return end === -1 ? row : [...row.slice(0, end), this.endId];
    });
  }

  async close(): Promise<void> {
    await releaseSession(this.session);
  }
}
