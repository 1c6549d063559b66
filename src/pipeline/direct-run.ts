/**
 * A model pipeline's plain requests (one sequence, no beams, no log-probabilities), run straight on the
 * engine: the tokenize, generate and detokenize steps of the pipeline's ensemble, with the same inputs,
 * parameters, errors and answers, but without the tensor snapshots between them, which cost the whole
 * sequence again at every token. Each token the engine gives is decoded incrementally (StreamDecoder),
 * matched against the stop strings, and sent as one update. Other requests take the ensemble.
 */
import { Observable, type Subscription } from 'rxjs';
import { generateRequests, inStep, type CompiledEnsemble, type ModelStore, type TensorRecord } from '../ensemble/index.ts';
import { ChorusError } from '../errors.ts';
import { StopStringMatcher, type TokenEvent } from '../generation/index.ts';
import { StreamDecoder, type Tokenizer } from '../tokenizers/index.ts';
import type { PipelineUpdate } from './pipeline.ts';

/** What a model pipeline runs directly: its model and tokenizer, and the ensemble it stands for. */
export interface DirectModel {
  store: ModelStore;
  model: string;
  tokenizer: Tokenizer;
  ensemble: CompiledEnsemble;
}

/** Whether a model pipeline's request (as the ensemble's input tensors) runs directly. */
export function runsDirect(inputs: TensorRecord): boolean {
  const atMostOne = (port: string): boolean => inputs[port] === undefined || Number(inputs[port].data[0]) <= 1;
  const none = (port: string): boolean => inputs[port] === undefined || !inputs[port].data[0];
  return atMostOne('num_return_sequences') && atMostOne('beam_width') && none('is_return_log_probs') && none('top_logprobs');
}

/**
 * Runs the request: streamed, an update per token that adds text, then the last one with the finish
 * reason and usage; not streamed, the last one alone.
 */
export function runDirect(direct: DirectModel, inputs: TensorRecord, stops: string[], stream: boolean): Observable<PipelineUpdate> {
  return new Observable<PipelineUpdate>((subscriber) => {
    let engine: Subscription | undefined;
    let closed = false;
    const fail = (step: string) => (error: unknown): void => {
      if (closed) return;
      closed = true;
      subscriber.error(step === '' ? error : inStep(error, step));
    };
    let prompt: number[];
    try {
      direct.ensemble.checkInputs(inputs);
    } catch (error) {
      fail('')(error);
      return undefined;
    }
    try {
      const text = inputs.text_input!.data[0] as string;
      const add = inputs.add_special_tokens === undefined ? true : (inputs.add_special_tokens.data[0] as boolean);
      prompt = direct.tokenizer.encode(text, { addSpecialTokens: add });
    } catch (error) {
      fail('tokenize')(error);
      return undefined;
    }
    const { tokenizer } = direct;
    const matcher = new StopStringMatcher(stops);
    let text = '';
    let generated = 0;
    let finish = '';
    let stopped = false;
    // Not streamed, the text goes out once, with the last update (its delta then all of it).
    let sent = '';
    const end = (): void => {
      if (closed) return;
      closed = true;
      const held = stopped ? '' : matcher.flush();
      text += held;
      subscriber.next({ choices: [{ index: 0, text, delta: text.slice(sent.length), finishReason: stopped ? 'stop' : finish || 'length' }], usage: { promptTokens: prompt.length, completionTokens: generated } });
      subscriber.complete();
    };
    const add = (fresh: string): void => {
      if (closed || fresh === '') return;
      const { text: delta, stopped: hit } = matcher.push(fresh);
      if (delta !== '') {
        text += delta;
        if (stream) {
          sent = text;
          subscriber.next({ choices: [{ index: 0, text, delta }] });
        }
      }
      if (hit) {
        stopped = true;
        engine?.unsubscribe();
        end();
      }
    };
    direct.store.model(direct.model).then((model) => {
      if (closed) return;
      if (model.engine !== 'generate') throw new ChorusError('CHORUS_CONFIG_INVALID', `model ${model.name} has engine ${model.engine}; generate steps need engine generate`);
      const { prompts, params } = generateRequests(model, {
        ...inputs,
        input_ids: { datatype: 'UINT32', shape: [1, prompt.length], data: prompt },
        input_lengths: { datatype: 'UINT32', shape: [1, 1], data: [prompt.length] },
      });
      // Ids past the tokenizer's vocabulary (an embedding padded beyond it) have no text.
      const decoder = new StreamDecoder(tokenizer, { skipSpecialTokens: true, context: model.seq2seq ? [] : prompt });
      engine = model.generator.submit({ inputIds: prompts[0]!, params: params[0]!, stream }).subscribe({
        next: (event: TokenEvent) => {
          generated++;
          if (event.finishReason !== undefined) finish = event.finishReason;
          if (event.token < tokenizer.vocabSize) add(decoder.push(event.token));
        },
        error: fail('generate'),
        complete: () => {
          add(decoder.flush());
          end();
        },
      });
      // A stop string the engine's first tokens reached while subscribing.
      if (closed) engine.unsubscribe();
    }).catch(fail('generate'));
    return () => {
      closed = true;
      engine?.unsubscribe();
    };
  });
}
