/**
 * The README's curl examples, run as written against a server over the bundled repository, offline and
 * with an empty cache (as on a fresh clone: stories serves its random-weights fallback). The lines are
 * read from README.md's sh blocks; only their host:port (localhost:8000) is rewritten to the test
 * server's, which listens in this process on a free port.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { bundledRepositoryDir } from '../../src/repository/index.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { sseData, startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';
process.env.CHORUS_CACHE = scratchDir('chorus-readme-cache-');

const README_HOST = 'localhost:8000';

/** The curl commands of README.md's sh blocks, continuation lines joined. */
function readmeCurls(markdown: string): string[] {
  const blocks = [...markdown.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) => m[1]!);
  const commands = blocks.flatMap((block) => block.replace(/\\\n\s*/g, '').split('\n'));
  return commands.map((line) => line.trim()).filter((line) => line.startsWith('curl '));
}

const curls = readmeCurls(readFileSync(join(ROOT, 'README.md'), 'utf8'));
let server: TestServer;

before(async () => {
  server = await startServer(bundledRepositoryDir());
});
after(async () => server?.close());

/** Runs a README line with only its host:port pointed at the test server. */
async function run(line: string): Promise<string> {
  assert.ok(line.includes(README_HOST), `a README curl line talks to ${README_HOST}: ${line}`);
  const { stdout } = await promisify(execFile)('bash', ['-c', line.replaceAll(README_HOST, new URL(server.url).host)], { timeout: 120_000 });
  return stdout;
}

/** The text an answer carries: a generate answer's text_output, or a stream's deltas joined. */
function answerText(body: string): string {
  if (body.startsWith('data:')) {
    const events = sseData(body);
    assert.equal(events.at(-1), '[DONE]', body);
    return events
      .slice(0, -1)
      .map((data) => JSON.parse(data) as { error?: unknown; choices?: Array<{ delta?: { content?: string }; text?: string }> })
      .map((event) => {
        assert.equal(event.error, undefined, JSON.stringify(event.error));
        return event.choices?.map((c) => c.delta?.content ?? c.text ?? '').join('') ?? '';
      })
      .join('');
  }
  const answer = JSON.parse(body) as { error?: unknown; text_output?: string };
  assert.equal(answer.error, undefined, JSON.stringify(answer.error));
  return answer.text_output ?? '';
}

test('README.md shows the streamed chat and the generate example', () => {
  assert.ok(curls.some((c) => c.includes('/v1/chat/completions') && c.includes('"stream":true')), curls.join('\n'));
  assert.ok(curls.some((c) => c.includes('/generate') && !c.includes('content-type')), curls.join('\n'));
});

for (const line of curls) {
  test(`README: ${line.slice(0, 90)}`, async () => {
    const body = await run(line);
    assert.ok(answerText(body).length > 0, body);
    if (line.includes('/generate')) {
      const answer = JSON.parse(body) as { finish_reason: string; usage: { completion_tokens: number } };
      const asked = /"max_tokens":(\d+)/.exec(line);
      if (asked !== null) {
        assert.equal(answer.finish_reason, 'length');
        assert.equal(answer.usage.completion_tokens, Number(asked[1]));
      }
    }
  });
}
