/**
 * The playground in a real browser: Chromium (helpers/chromium.ts) driven by playwright-core, against a server over
 * the bundled repository (stories pointed at the real model; gpt2 on its random-weight fallback, a
 * model slow enough on a CPU to stop mid-stream). Screenshots go to test-output/playground/.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { bundledRepositoryDir, parseSourceOverride } from '../../src/repository/index.ts';
import { chromiumExecutable } from '../helpers/chromium.ts';
import { ROOT, STORIES } from '../helpers/paths.ts';
import { startServer, type TestServer } from '../helpers/server.ts';

process.env.HF_HUB_OFFLINE = '1';
const SHOTS = join(ROOT, 'test-output/playground');
const KEY = 'sk-playground';

let server: TestServer;
let browser: Browser;
let page: Page;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  server = await startServer(bundledRepositoryDir(), { apiKey: KEY, sourceOverrides: [parseSourceOverride(`stories=${STORIES}/stories260K.bin`)] });
  browser = await chromium.launch({ executablePath: await chromiumExecutable(), headless: true, args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  page.on('pageerror', (error) => assert.fail(`page error: ${error.message}`));
});
after(async () => {
  await browser?.close();
  await server?.close();
});

/** The running-requests gauge of a model, from /metrics. */
async function running(model: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`chorus_engine_running_requests{model="${model}"}`));
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
}

test('the page asks for the API key once, lists the pipelines, and streams a chat answer from stories', async () => {
  await page.goto(server.url);
  // The first API call answers 401: the page asks for the key.
  await page.locator('#key-dialog[open]').waitFor();
  await page.locator('#key-input').fill(KEY);
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.locator('#pipeline option[value="stories"]').waitFor({ state: 'attached' });
  const options = await page.locator('#pipeline option').allTextContents();
  assert.deepEqual(options, ['bart', 'gemma2', 'gpt', 'gpt2', 'llama3', 'mistral', 'phi3', 'qwen3', 't5', 'stories'].sort());
  // It opens on a pipeline that chats on real weights, not on the first name (bart, a summarizer) nor
  // on the first that chats (gemma2, on random weights here).
  assert.equal(await page.locator('#pipeline').inputValue(), 'stories');
  // stories runs the real model here: no random-weights badge.
  assert.equal(await page.locator('#random-badge').isHidden(), true);
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', '120');
  await page.fill('#system', 'Tell a story.');
  // Record every length the assistant's text takes as it changes.
  await page.evaluate(() => {
    const lengths: number[] = [];
    (window as unknown as { lengths: number[] }).lengths = lengths;
    new MutationObserver(() => {
      const reply = document.querySelector('.message.assistant .content');
      if (reply !== null) lengths.push(reply.textContent!.length);
    }).observe(document.getElementById('messages')!, { subtree: true, childList: true, characterData: true });
  });
  await page.getByLabel('Message').fill('Lily and Ben went to the park.');
  await page.getByLabel('Message').press('Enter');
  await page.locator('#finish', { hasText: 'length' }).waitFor();
  const reply = await page.locator('.message.assistant .content').textContent();
  assert.ok(reply!.length > 100, reply!);
  const lengths = await page.evaluate(() => (window as unknown as { lengths: number[] }).lengths);
  const distinct = [...new Set(lengths)].filter((n) => n > 0);
  assert.ok(distinct.length >= 10, `the text grew in ${distinct.length} steps`);
  assert.deepEqual(distinct, [...distinct].sort((a, b) => a - b));
  assert.equal(await page.locator('#tokens').textContent(), '120');
  assert.match((await page.locator('#ttft').textContent())!, /^\d+ ms$/);
  assert.ok(Number(await page.locator('#rate').textContent()) > 0);
  // The key was asked for once: no dialog now.
  assert.equal(await page.locator('#key-dialog[open]').count(), 0);
  await page.screenshot({ path: join(SHOTS, 'chat.png'), fullPage: true });
});

test('stop ends a long generation: the stream stops, the engine\'s running count drops', async () => {
  await page.getByRole('tab', { name: 'Completion' }).click();
  await page.selectOption('#pipeline', 'gpt2');
  // gpt2 has no files here: it runs on seeded random weights, and the page says so.
  await page.locator('#random-badge').waitFor({ state: 'visible' });
  assert.equal(await page.locator('#random-badge').textContent(), 'random weights');
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', '400');
  await page.fill('#prompt', 'The weather today');
  await page.getByRole('button', { name: 'Generate' }).click();
  // Wait for text to stream in (the model loads, and is built from its fallback, on first use).
  await page.waitForFunction(() => (document.querySelector('#completion .generated')?.textContent ?? '').length > 0, undefined, { timeout: 240_000 });
  assert.equal(await running('gpt2'), 1);
  await page.getByRole('button', { name: 'Stop' }).and(page.locator('#completion-stop')).click();
  await page.locator('#finish', { hasText: 'stopped' }).waitFor();
  const stoppedAt = Number(await page.locator('#tokens').textContent());
  assert.ok(stoppedAt > 0 && stoppedAt < 400, `stopped after ${stoppedAt} tokens`);
  // The server cancels the generation when the connection closes.
  const deadline = Date.now() + 10_000;
  while ((await running('gpt2')) !== 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(await running('gpt2'), 0);
  assert.equal(await page.locator('#completion-send').isEnabled(), true);
  await page.screenshot({ path: join(SHOTS, 'stopped.png'), fullPage: true });
});

test('the repository tab draws the gpt ensemble: three steps and their wiring', async () => {
  // Keyboard: from the Completion tab, ArrowRight selects Repository.
  await page.getByRole('tab', { name: 'Completion' }).focus();
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getByRole('tab', { name: 'Repository' }).getAttribute('aria-selected'), 'true');
  const gpt = page.locator('section[data-ensemble="gpt"] svg');
  await gpt.waitFor();
  const nodes = await gpt.locator('g.node').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-node')));
  assert.deepEqual(nodes, ['inputs', 'preprocessing', 'fastertransformer', 'postprocessing', 'outputs']);
  const edges = await gpt.locator('g.edge').evaluateAll((gs) => gs.map((g) => `${g.getAttribute('data-from')}->${g.getAttribute('data-to')}: ${g.getAttribute('data-tensors')}`));
  assert.ok(edges.includes('inputs->preprocessing: INPUT_0,INPUT_2,INPUT_3'), edges.join('\n'));
  assert.ok(edges.includes('preprocessing->fastertransformer: _ids,_lengths,_bad,_stop'), edges.join('\n'));
  assert.ok(edges.includes('fastertransformer->postprocessing: _out,sequence_length'), edges.join('\n'));
  assert.ok(edges.includes('postprocessing->outputs: OUTPUT_0'), edges.join('\n'));
  assert.ok(edges.some((e) => e.startsWith('inputs->fastertransformer: INPUT_1,')), edges.join('\n'));
  assert.ok(edges.includes('fastertransformer->outputs: sequence_length,cum_log_probs,output_log_probs'), edges.join('\n'));
  // Each step box names its kind and target.
  assert.equal(await gpt.locator('g.node[data-node="fastertransformer"] text.kind').textContent(), 'generate gpt2');
  await page.setViewportSize({ width: 1900, height: 900 });
  await page.locator('section[data-ensemble="gpt"]').screenshot({ path: join(SHOTS, 'ensemble-gpt.png') });
  await page.setViewportSize({ width: 1200, height: 860 });
});

test('at 1280 px every bundled ensemble is drawn whole', async () => {
  await page.setViewportSize({ width: 1280, height: 900 });
  const sections = page.locator('section[data-ensemble]');
  const names = await sections.evaluateAll((all) => all.map((s) => (s as HTMLElement).dataset.ensemble));
  // Every ensemble of the bundled repository, in the page's name order.
  const bundled = readdirSync(join(bundledRepositoryDir(), 'ensembles')).filter((f) => f.endsWith('.yaml')).map((f) => f.slice(0, -'.yaml'.length));
  assert.deepEqual([...names].sort(), bundled.sort());
  for (const name of names) {
    const fit = await page.locator(`section[data-ensemble="${name}"] .graph-scroll`).evaluate((box) => {
      const svg = box.querySelector('svg')!.getBoundingClientRect();
      const frame = box.getBoundingClientRect();
      return { overflow: box.scrollWidth - box.clientWidth, right: svg.right - frame.right, left: frame.left - svg.left, width: svg.width };
    });
    assert.ok(fit.overflow <= 0 && fit.right <= 0 && fit.left <= 0 && fit.width > 200, `${name}: ${JSON.stringify(fit)}`);
  }
  await page.screenshot({ path: join(SHOTS, 'repository-1280.png'), fullPage: true });
  await page.setViewportSize({ width: 1200, height: 860 });
});

test('the repository tab shows the models\' states live, in words', async () => {
  assert.equal(await page.getByRole('tab', { name: 'Repository' }).getAttribute('aria-selected'), 'true');
  assert.match((await page.locator('#panel-repository .note').textContent())!, /load on the first request/);
  const state = (model: string) => page.locator('section.models tr', { has: page.locator(`td:text-is("${model}")`) }).locator('td').nth(3);
  const weights = (model: string) => page.locator('section.models tr', { has: page.locator(`td:text-is("${model}")`) }).locator('td').nth(4);
  // stories answered the chat: ready, from its real file; t5-small has not been asked for yet.
  assert.equal(await state('stories').textContent(), 'ready');
  assert.equal(await weights('stories').textContent(), 'from source');
  assert.equal(await state('t5-small').textContent(), 'not loaded: loads on first request');
  assert.equal(await weights('t5-small').textContent(), 'random');
  // Unloaded and loaded again behind the page's back: the tab follows without a reload.
  const control = (action: string) => fetch(`${server.url}/v2/repository/models/stories/${action}`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` } });
  assert.equal((await control('unload')).status, 200);
  await page.locator('section.models td', { hasText: 'not loaded: loads on first request' }).and(state('stories')).waitFor({ timeout: 10_000 });
  assert.equal((await control('load')).status, 200);
  await page.locator('section.models td', { hasText: 'ready' }).and(state('stories')).waitFor({ timeout: 10_000 });
});

test('on a phone-sized window the page fits its width', async () => {
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await phone.addInitScript((key) => localStorage.setItem('chorus.apiKey', key), KEY);
  await phone.goto(server.url);
  await phone.locator('#pipeline option[value="stories"]').waitFor({ state: 'attached' });
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `${overflow}px wider than the window`);
  // Every control has an accessible name.
  for (const id of ['pipeline', 'system', 'chat-input', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'stop']) {
    const label = await phone.locator(`#${id}`).evaluate((el) => (el as HTMLInputElement).labels?.[0]?.textContent?.trim() ?? '');
    assert.ok(label.length > 0, `#${id} has no label`);
  }
  await phone.screenshot({ path: join(SHOTS, 'phone.png'), fullPage: true });
  await phone.close();
});
