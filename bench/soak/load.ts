/** The soak's requests: every protocol the server speaks, streamed and not, cancelled streams, bad bodies. */

export const LOAD_KINDS = [
  'openai-chat',
  'openai-chat-stream',
  'openai-chat-cancel',
  'openai-completion',
  'openai-completion-stream',
  'generate',
  'generate-stream',
  'generate-stream-cancel',
  'kserve-infer',
  'bad-request',
] as const;
export type LoadKind = (typeof LOAD_KINDS)[number];

/** Outcomes per kind: answered, cancelled by the client, refused with a 4xx as meant, and anything else. */
export interface Tally {
  byKind: Record<string, { ok: number; cancelled: number; rejected: number; failed: number }>;
  failures: string[];
}

const PROMPTS = ['Once upon a time', 'Lily and Ben went to the park.', 'The little dog', '', 'One day, a girl named Sue found a big red ball'];
const json = { 'content-type': 'application/json' };

/** One request of `kind` to the `stories` pipeline, counted in `tally`. */
export async function runRequest(url: string, kind: LoadKind, random: () => number, tally: Tally): Promise<void> {
  const prompt = PROMPTS[Math.floor(random() * PROMPTS.length)]!;
  const maxTokens = 4 + Math.floor(random() * 45);
  const temperature = Math.round(random() * 10) / 10;
  const count = tally.byKind[kind]!;
  const controller = new AbortController();
  const post = (path: string, body: unknown): Promise<Response> => fetch(`${url}${path}`, { method: 'POST', headers: json, body: JSON.stringify(body), signal: controller.signal });
  const chat = { model: 'stories', max_tokens: maxTokens, temperature, messages: [{ role: 'user', content: prompt }] };
  try {
    let response: Response;
    let cancelAfter: number | undefined;
    switch (kind) {
      case 'openai-chat':
        response = await post('/v1/chat/completions', chat);
        break;
      case 'openai-chat-stream':
        response = await post('/v1/chat/completions', { ...chat, stream: true });
        break;
      case 'openai-chat-cancel':
        response = await post('/v1/chat/completions', { ...chat, max_tokens: 200, stream: true });
        cancelAfter = 1 + Math.floor(random() * 4);
        break;
      case 'openai-completion':
        response = await post('/v1/completions', { model: 'stories', prompt, max_tokens: maxTokens, temperature });
        break;
      case 'openai-completion-stream':
        response = await post('/v1/completions', { model: 'stories', prompt, max_tokens: maxTokens, temperature, stream: true });
        break;
      case 'generate':
        response = await post('/v2/models/stories/generate', { text_input: prompt, max_tokens: maxTokens, temperature });
        break;
      case 'generate-stream':
        response = await post('/v2/models/stories/generate_stream', { text_input: prompt, max_tokens: maxTokens, temperature });
        break;
      case 'generate-stream-cancel':
        response = await post('/v2/models/stories/generate_stream', { text_input: prompt, max_tokens: 200, temperature });
        cancelAfter = 1 + Math.floor(random() * 4);
        break;
      case 'kserve-infer':
        response = await post('/v2/models/stories/infer', {
          inputs: [
            { name: 'text_input', datatype: 'BYTES', shape: [1], data: [prompt] },
            { name: 'max_tokens', datatype: 'INT32', shape: [1], data: [maxTokens] },
          ],
        });
        break;
      case 'bad-request': {
        const bodies: Array<[string, unknown]> = [
          ['/v1/chat/completions', { ...chat, max_tokens: -3 }],
          ['/v1/completions', { model: 'stories', prompt: 7 }],
          ['/v2/models/stories/generate', { text_input: prompt, temperature: 'hot' }],
          ['/v2/models/stories/infer', { inputs: [] }],
        ];
        const [path, body] = bodies[Math.floor(random() * bodies.length)]!;
        response = await post(path, body);
        await response.arrayBuffer();
        if (response.status >= 400 && response.status < 500) count.rejected++;
        else fail(tally, kind, `answered ${response.status} to a bad body`);
        return;
      }
    }
    if (cancelAfter === undefined) {
      const body = await response.text();
      if (response.status === 200 && !body.includes('"error"')) count.ok++;
      else fail(tally, kind, `${response.status}: ${body.slice(0, 200)}`);
      return;
    }
    if (response.status !== 200) {
      fail(tally, kind, `${response.status}: ${(await response.text()).slice(0, 200)}`);
      return;
    }
    const reader = response.body!.getReader();
    for (let events = 0; events < cancelAfter; events++) if ((await reader.read()).done) break;
    controller.abort();
    count.cancelled++;
  } catch (error) {
    if (controller.signal.aborted) count.cancelled++;
    else fail(tally, kind, error instanceof Error ? `${error.message}${error.cause instanceof Error ? ` (${error.cause.message})` : ''}` : String(error));
  }
}

function fail(tally: Tally, kind: LoadKind, why: string): void {
  tally.byKind[kind]!.failed++;
  if (tally.failures.length < 100) tally.failures.push(`${kind}: ${why}`);
}
