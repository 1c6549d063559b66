import type { Engine, SamplingParams } from '../../src/generation/index.ts';

/**
 * Requests that join a run of steps under way, none with penalties: two long rows and a shorter one
 * start together, a fourth joins past them once the run has begun (at the first's first token), and
 * each of the last three as the one before it ends, into the ended row's slot. Their prompts take one
 * to two prefill widths; min_length, top_logprobs and an argmax row among them.
 */
export const JOIN_REQUESTS: Array<{ prompt: number[]; params: SamplingParams }> = [
  { prompt: [5, 6, 7], params: { temperature: 0.8, runtime_top_p: 0.9, random_seed: 21, request_output_len: 90 } },
  { prompt: [9, 10], params: { temperature: 0.8, runtime_top_p: 0.9, random_seed: 31, request_output_len: 90 } },
  { prompt: [11, 12, 13, 14, 15, 16, 17, 18, 19, 20], params: { temperature: 0.9, random_seed: 23, request_output_len: 40 } },
  { prompt: [16], params: { temperature: 1.1, runtime_top_k: 20, random_seed: 24, min_length: 8, request_output_len: 90 } },
  { prompt: [21, 22, 23, 24, 25], params: { temperature: 0.9, random_seed: 25, top_logprobs: 2, is_return_log_probs: true, request_output_len: 6 } },
  { prompt: [26, 27, 28], params: { temperature: 0, request_output_len: 7 } },
  { prompt: Array.from({ length: 40 }, (_, i) => 30 + i), params: { temperature: 0.6, random_seed: 27, request_output_len: 9 } },
];

function tokensOf(engine: Engine, i: number, onToken: (count: number) => void = () => undefined): Promise<number[]> {
  const { prompt, params } = JOIN_REQUESTS[i]!;
  return new Promise((resolve, reject) => {
    const got: number[] = [];
    engine.submit({ inputIds: prompt, params, stream: true }).subscribe({
      next: (e) => {
        got.push(e.token);
        onToken(got.length);
      },
      error: reject,
      complete: () => resolve(got),
    });
  });
}

/** Each request's tokens run alone, one after another. */
export async function joinsAlone(engine: Engine): Promise<number[][]> {
  const alone: number[][] = [];
  for (let i = 0; i < JOIN_REQUESTS.length; i++) alone.push(await tokensOf(engine, i));
  return alone;
}

/** Each request's tokens, the requests arriving as JOIN_REQUESTS says. */
export async function joinsTogether(engine: Engine): Promise<number[][]> {
  const together: number[][] = new Array(JOIN_REQUESTS.length);
  const chain = async (i: number): Promise<void> => {
    together[i] = await tokensOf(engine, i);
    if (i + 1 < JOIN_REQUESTS.length) await chain(i + 1);
  };
  let fourth: Promise<void> | undefined;
  await Promise.all([
    tokensOf(engine, 0, (n) => {
      if (n === 1) fourth = tokensOf(engine, 3).then((got) => void (together[3] = got));
    }).then((got) => void (together[0] = got)),
    tokensOf(engine, 1).then((got) => void (together[1] = got)),
    tokensOf(engine, 2).then(async (got) => {
      together[2] = got;
      await chain(4);
    }),
  ]);
  await fourth;
  return together;
}

/**
 * Four rows run (three long, one cancelled after its fifth token); a fifth request, submitted as the
 * fourth is cancelled, waits for a slot and joins the run in the cancelled row's. Gives the four that
 * finish (0, 1, 2 and the fifth) and the cancelled one's tokens.
 */
export async function joinsAfterCancel(engine: Engine): Promise<{ finished: number[][]; cancelled: number[] }> {
  const finished: number[][] = new Array(4);
  const cancelled: number[] = [];
  let fifth: Promise<void> | undefined;
  const long = [0, 1, 2].map((i) => tokensOf(engine, i).then((got) => void (finished[i] = got)));
  await new Promise<void>((resolve, reject) => {
    const subscription = engine.submit({ inputIds: JOIN_REQUESTS[3]!.prompt, params: JOIN_REQUESTS[3]!.params, stream: true }).subscribe({
      next: (e) => {
        cancelled.push(e.token);
        if (cancelled.length === 5) {
          subscription.unsubscribe();
          fifth = tokensOf(engine, 4).then((got) => void (finished[3] = got));
          resolve();
        }
      },
      error: reject,
    });
  });
  await Promise.all(long);
  await fifth;
  return { finished, cancelled };
}
