/**
 * What streaming detokenization costs a token on this CPU, for each real tokenizer: news articles from
 * ../shared encoded, then streamed back one id at a time through StreamDecoder (what every streamed
 * request does on the server), the deltas checked against decode(ids). The same run also streams each
 * without its ids' bytes and fixed piece texts (`tokenBytes`, `pieceText` hidden), so that each push
 * decodes its window: the two side by side. Median of ROUNDS rounds.
 * Usage: node --import tsx bench/cpu/detokenize.ts   (ROUNDS=5 ARTICLES=30)
 * Prints a table; writes bench/results/detokenize-cpu-<date>.json.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { Llama2cTokenizer, openTokenizerPath, SentencePieceAdapter, StreamDecoder, TiktokenAdapter, type Tokenizer } from '../../src/tokenizers/index.ts';

const ROOT = join(import.meta.dirname, '../..');
const SHARED = join(ROOT, '../shared');
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const ARTICLES = Number(process.env.ARTICLES ?? 30);

const text = readFileSync(join(SHARED, 'data/cnndm/summeval_cnndm_test100.jsonl'), 'utf8')
  .trim()
  .split('\n')
  .slice(0, ARTICLES)
  .map((line) => (JSON.parse(line) as { article: string }).article)
  .join('\n');

/** The same tokenizer without its ids' bytes or fixed piece texts: StreamDecoder decodes its window at each push. */
function withoutShortcuts(tokenizer: Tokenizer): Tokenizer {
  return { kind: tokenizer.kind, vocabSize: tokenizer.vocabSize, specialTokens: tokenizer.specialTokens, chatTemplate: tokenizer.chatTemplate, encode: tokenizer.encode.bind(tokenizer), decode: tokenizer.decode.bind(tokenizer) };
}

/** Microseconds a token to stream `ids` through `tokenizer`, the median of ROUNDS; throws where the text differs. */
function streamed(tokenizer: Tokenizer, ids: number[]): number {
  const want = tokenizer.decode(ids, { skipSpecialTokens: true });
  const times: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const decoder = new StreamDecoder(tokenizer, { skipSpecialTokens: true });
    const started = performance.now();
    let out = '';
    for (const id of ids) out += decoder.push(id);
    out += decoder.flush();
    times.push(((performance.now() - started) * 1000) / ids.length);
    if (out !== want) throw new Error(`${tokenizer.kind}: the streamed text differs from decode(ids)`);
  }
  return times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
}

const tokenizers: Array<{ name: string; tokenizer: Tokenizer }> = [
  { name: 'GPT-2 (tiktoken)', tokenizer: new TiktokenAdapter({ encoding: 'gpt2' }) },
  { name: 'GPT-2 (tokenizer.json)', tokenizer: await openTokenizerPath(join(SHARED, 'tokenizers/gpt2/tokenizer.json')) },
  { name: 'Llama 2 (SentencePiece)', tokenizer: await SentencePieceAdapter.load(join(SHARED, 'tokenizers/llama2-32k/tokenizer.model'), { addBos: true }) },
  { name: 'T5 (SentencePiece)', tokenizer: await SentencePieceAdapter.load(join(SHARED, 'tokenizers/t5/spiece.model')) },
  { name: 'Llama 2 (llama2.c)', tokenizer: Llama2cTokenizer.load(join(SHARED, 'tokenizers/llama2-32k/tokenizer.bin')) },
];

const rows: Array<{ tokenizer: string; ids: number; usPerToken: number; usPerTokenWindowDecode?: number }> = [];
for (const { name, tokenizer } of tokenizers) {
  const ids = tokenizer.encode(text);
  const row: (typeof rows)[number] = { tokenizer: name, ids: ids.length, usPerToken: streamed(tokenizer, ids) };
  row.usPerTokenWindowDecode = streamed(withoutShortcuts(tokenizer), ids);
  rows.push(row);
}

const cpu = `${cpus()[0]?.model.trim() ?? 'cpu'} (${cpus().length} cores)`;
console.log(`Streaming detokenization, ${ARTICLES} news articles, one id a push, median of ${ROUNDS}; ${cpu}`);
console.log('| tokenizer | ids | µs a token | µs a token, each push decoding its window |');
console.log('| --- | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.tokenizer} | ${r.ids} | ${r.usPerToken.toFixed(2)} | ${r.usPerTokenWindowDecode?.toFixed(2) ?? '-'} |`);
const date = new Date().toISOString().slice(0, 10);
const out = join(ROOT, `bench/results/detokenize-cpu-${date}.json`);
writeFileSync(out, `${JSON.stringify({ createdAt: new Date().toISOString(), cpu, articles: ARTICLES, rounds: ROUNDS, command: 'node --import tsx bench/cpu/detokenize.ts', rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
