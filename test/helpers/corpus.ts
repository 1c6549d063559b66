/**
 * The test corpus: real text drawn from ../shared/data (German and English news, CNN/DailyMail
 * articles, LAMBADA stories, BoolQ questions and passages), every k-th item so the sample is fixed,
 * plus hand-written edge cases.
 */
import { readFileSync } from 'node:fs';
import { SHARED } from './paths.ts';

function lines(path: string): string[] {
  return readFileSync(`${SHARED}/data/${path}`, 'utf8').split('\n').filter((line) => line.trim() !== '');
}

function jsonl<T>(path: string): T[] {
  return lines(path).map((line) => JSON.parse(line) as T);
}

/** Every `step`-th item, `count` of them. */
function sample<T>(items: T[], count: number): T[] {
  const step = Math.max(1, Math.floor(items.length / count));
  return items.filter((_, i) => i % step === 0).slice(0, count);
}

/** Hand-written strings that stress tokenizers. */
export const EDGE_CASES: readonly string[] = [
  '',
  ' ',
  '   ',
  'a',
  ' leading space',
  'trailing space ',
  'double  space and   triple',
  'tabs\tand\t\ttabs',
  'line one\nline two\n\nline four\n',
  '\r\nwindows line ends\r\n',
  'Café, naïve, résumé, Ångström, São Paulo, Dvořák',
  'e\u0301 (e + combining acute) vs é',
  'Größe, Straße, Übermaß, Ärger, Öl',
  '日本語のテキスト、漢字とかな。',
  '中文文本：你好，世界！',
  '한국어 문장입니다.',
  'Русский текст, ёлка.',
  'Ελληνικά κείμενα',
  'עברית ועוד',
  'العربية نص',
  'हिन्दी पाठ',
  'emoji 😀😃😄 in a row',
  'family 👨‍👩‍👧‍👦 and flag 🏳️‍🌈 ZWJ sequences',
  'skin tones 👍🏽 👋🏿',
  'math ∑∫√∞ ≠ ≤ ≥ and arrows → ⇒',
  'function add(a, b) {\n  return a + b;\n}\n',
  'def f(x):\n    return x ** 2  # square\n',
  '<html><body class="x">&amp; &lt;tag&gt;</body></html>',
  '{"key": [1, 2.5e-3, null, true]}',
  'URL https://example.com/path?q=1&r=two#frag',
  "it's, don't, they're, we'll, I'd",
  'numbers 1234567890 3.14159 -42 1e10',
  'punctuation !!! ??? ... --- *** ___',
  'MiXeD CaSe AND UPPER',
  '    indented code block',
  'zero\u200bwidth space and\u00a0nbsp',
];

/** Real text: 100 German and 100 English news sentences, 40 news paragraphs, 60 story passages, 40 questions and passages. */
export function corpus(): string[] {
  const de = sample(lines('wmt14_newstest2014_deen/newstest2014-deen.de'), 100);
  const en = sample(lines('wmt14_newstest2014_deen/newstest2014-deen.en'), 100);
  const articles = sample(jsonl<{ article: string }>('cnndm/summeval_cnndm_test100.jsonl'), 40).map((a) => a.article.slice(0, 1200));
  const stories = sample(jsonl<{ text: string }>('lambada/lambada_test.jsonl'), 60).map((s) => s.text);
  const boolq = sample(jsonl<{ question: string; passage: string }>('boolq_eraser/val.simple.jsonl'), 20).flatMap((q) => [q.question, q.passage.slice(0, 600)]);
  return [...de, ...en, ...articles, ...stories, ...boolq, ...EDGE_CASES];
}
