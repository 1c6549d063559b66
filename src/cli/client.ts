/**
 * `chorus client --url URL --pipeline NAME --prompts "a" "b" ... [--stream] [--concurrency N]`: PyTriton's
 * client.py for a running Chorus (or Triton) server. Each prompt goes to the pipeline's generate
 * endpoint (`/generate_stream` with --stream), up to N at once; answers print in prompt order, each as
 * `> prompt` and the text. With --stream the text of the first unfinished prompt prints as it comes;
 * the others' are held until their turn.
 */
import type { Command } from 'commander';
import { ChorusError, invalidArgument } from '../errors.ts';
import { generateRemote, generateStreamRemote, type Remote } from './remote.ts';

interface ClientOptions {
  url: string;
  pipeline: string;
  prompts: string[];
  stream?: boolean;
  concurrency: string;
  maxTokens?: string;
  field: string[];
  apiKey?: string;
}

export function registerClient(program: Command): void {
  program
    .command('client')
    .description('send prompts to a running server\'s pipeline (Triton\'s generate extension) and print the answers')
    .requiredOption('--url <url>', 'the server, e.g. http://localhost:8000')
    .requiredOption('-p, --pipeline <name>', 'the pipeline (or model) to ask')
    .requiredOption('--prompts <text...>', 'the prompts, one request each')
    .option('--stream', 'stream each answer as it is generated (/generate_stream)')
    .option('-c, --concurrency <n>', 'requests in flight at once', '1')
    .option('--max-tokens <n>', 'tokens to generate per prompt (the pipeline\'s default otherwise)')
    .option('-f, --field <NAME=JSON>', 'another request field (temperature=0.7, seed=3, ...); repeatable', (value: string, previous: string[]) => [...previous, value], [] as string[])
    .option('--api-key <key>', 'sent as Authorization: Bearer <key>')
    .action(async (options: ClientOptions) => {
      const concurrency = Number(options.concurrency);
      if (!Number.isInteger(concurrency) || concurrency < 1) throw invalidArgument('--concurrency', 'a positive integer', options.concurrency);
      const fields = requestFields(options);
      const remote: Remote = { url: options.url, ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }) };
      const printer = new OrderedPrinter(options.prompts.length, (text) => process.stdout.write(text));
      let next = 0;
      const worker = async (): Promise<void> => {
        for (let i = next++; i < options.prompts.length; i = next++) {
          const request = { text_input: options.prompts[i]!, ...fields };
          printer.write(i, `> ${options.prompts[i]}\n`);
          if (options.stream === true) {
            for await (const event of generateStreamRemote(remote, options.pipeline, request)) printer.write(i, event.text_output);
          } else {
            printer.write(i, (await generateRemote(remote, options.pipeline, request)).text_output);
          }
          printer.end(i, '\n');
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, options.prompts.length) }, worker));
    });
}

/** --max-tokens and every --field as request fields. */
function requestFields(options: ClientOptions): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  if (options.maxTokens !== undefined) {
    const n = Number(options.maxTokens);
    if (!Number.isInteger(n) || n < 1) throw invalidArgument('--max-tokens', 'a positive integer', options.maxTokens);
    fields.max_tokens = n;
  }
  for (const text of options.field) {
    const at = text.indexOf('=');
    if (at <= 0) throw invalidArgument('--field', 'NAME=JSON', text);
    try {
      fields[text.slice(0, at)] = JSON.parse(text.slice(at + 1)) as unknown;
    } catch {
      throw new ChorusError('CHORUS_INVALID_ARGUMENT', `--field ${text.slice(0, at)} must be JSON (a string needs quotes: '"text"'), got ${text.slice(at + 1)}`, { param: '--field' });
    }
  }
  return fields;
}

/**
 * Output of several concurrent answers in their order: answer i's text goes out as it comes while every
 * answer before it has ended; otherwise it waits, and goes out when its turn comes.
 */
export class OrderedPrinter {
  private current = 0;
  private readonly held: string[];
  private readonly ended: boolean[];

  constructor(
    count: number,
    private readonly out: (text: string) => void,
  ) {
    this.held = Array.from({ length: count }, () => '');
    this.ended = Array.from({ length: count }, () => false);
  }

  write(index: number, text: string): void {
    if (index === this.current) this.out(text);
    else this.held[index] += text;
  }

  end(index: number, text = ''): void {
    this.write(index, text);
    this.ended[index] = true;
    while (this.current < this.ended.length && this.ended[this.current]) {
      this.current++;
      if (this.current < this.held.length) {
        this.out(this.held[this.current]!);
        this.held[this.current] = '';
      }
    }
  }
}
