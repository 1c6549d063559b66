// The Chorus playground: chat and completion over the server's OpenAI routes, streamed (SSE read from
// fetch as it arrives), a stop button that aborts the request (the server cancels the generation when
// the connection closes), live figures, and the repository with each ensemble drawn as a graph.
import { drawEnsemble } from './graph.js';

const $ = (id) => document.getElementById(id);
const KEY = 'chorus.apiKey';
let apiKey = localStorage.getItem(KEY) ?? '';
let repository = null;
let running = null; // { controller, stopButton }

// ---------- HTTP with the API key (asked for once, on the first 401) ----------

function askForKey() {
  return new Promise((resolve) => {
    const dialog = $('key-dialog');
    $('key-input').value = '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok' ? $('key-input').value : null), { once: true });
    dialog.showModal();
  });
}

async function api(path, init = {}) {
  for (;;) {
    const headers = { ...(init.headers ?? {}), ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };
    const response = await fetch(path, { ...init, headers });
    if (response.status !== 401) return response;
    const key = await askForKey();
    if (key === null) throw new Error('this server needs an API key');
    apiKey = key;
    localStorage.setItem(KEY, key);
  }
}

async function errorOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    return typeof body.error === 'string' ? body.error : (body.error?.message ?? text);
  } catch {
    return `${response.status} ${text}`;
  }
}

/** The `data:` payloads of an SSE body, yielded as they arrive. */
async function* sse(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data !== '') yield data;
    }
  }
}

// ---------- Tabs (arrow keys move between them) ----------

const tabs = [...document.querySelectorAll('[role="tab"]')];
function select(tab) {
  for (const t of tabs) {
    const selected = t === tab;
    t.setAttribute('aria-selected', String(selected));
    t.tabIndex = selected ? 0 : -1;
    $(t.getAttribute('aria-controls')).hidden = !selected;
  }
  if (tab.id === 'tab-repository') void showRepository(true);
}
for (const tab of tabs) {
  tab.addEventListener('click', () => select(tab));
  tab.addEventListener('keydown', (event) => {
    const i = tabs.indexOf(tab);
    const next = event.key === 'ArrowRight' ? tabs[(i + 1) % tabs.length] : event.key === 'ArrowLeft' ? tabs[(i - 1 + tabs.length) % tabs.length] : event.key === 'Home' ? tabs[0] : event.key === 'End' ? tabs.at(-1) : null;
    if (next) {
      event.preventDefault();
      next.focus();
      select(next);
    }
  });
}

// ---------- Figures and status ----------

function status(text, error = false) {
  $('status').textContent = text;
  $('status').classList.toggle('error', error);
}

function figures({ ttft, tokens, rate, finish }) {
  $('ttft').textContent = ttft === undefined ? '–' : `${ttft.toFixed(0)} ms`;
  $('tokens').textContent = tokens === undefined ? '–' : String(tokens);
  $('rate').textContent = rate === undefined ? '–' : rate.toFixed(1);
  $('finish').textContent = finish ?? '–';
}

// ---------- Requests ----------

function sampling() {
  const body = {};
  const number = (id, field = id) => {
    const raw = $(id).value.trim();
    if (raw !== '') body[field] = Number(raw);
  };
  number('temperature');
  number('top_p');
  number('max_tokens');
  number('seed');
  const topK = Number($('top_k').value);
  if (topK > 0) body.top_k = topK;
  const stop = $('stop').value.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (stop.length > 0) body.stop = stop;
  return body;
}

/**
 * Streams one request; `onText` gets each delta. Resolves when the stream ends, is stopped, or fails.
 */
async function stream(kind, body, onText, stopButton, sendButton) {
  const controller = new AbortController();
  running = { controller, stopButton };
  stopButton.disabled = false;
  sendButton.disabled = true;
  const started = performance.now();
  let first;
  let chunks = 0;
  let usage;
  let finish;
  const update = () => {
    const now = performance.now();
    const tokens = usage?.completion_tokens ?? chunks;
    figures({ ttft: first === undefined ? undefined : first - started, tokens, rate: first === undefined || now - first < 1 ? undefined : ((tokens - 1) * 1000) / (now - first), finish });
  };
  figures({});
  status('generating…');
  try {
    const path = kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    const response = await api(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: $('pipeline').value, ...body, ...sampling(), stream: true, stream_options: { include_usage: true } }), signal: controller.signal });
    if (!response.ok) throw new Error(await errorOf(response));
    for await (const data of sse(response)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message ?? String(chunk.error));
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices ?? []) {
        const text = kind === 'chat' ? (choice.delta?.content ?? '') : (choice.text ?? '');
        if (choice.delta?.role !== undefined && text === '') continue;
        chunks++;
        if (first === undefined) first = performance.now();
        if (text !== '') onText(text);
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      update();
    }
    update();
    status(`done in ${((performance.now() - started) / 1000).toFixed(2)} s`);
  } catch (error) {
    if (controller.signal.aborted) {
      finish = 'stopped';
      update();
      status('stopped');
    } else {
      status(error.message, true);
      throw error;
    }
  } finally {
    void loadRepository().then(showBadge, () => {});
    running = null;
    stopButton.disabled = true;
    sendButton.disabled = false;
  }
}

function stop() {
  running?.controller.abort();
}
$('chat-stop').addEventListener('click', stop);
$('completion-stop').addEventListener('click', stop);
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && running) stop();
});

// ---------- Chat ----------

const history = [];

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `message ${role}`;
  const label = document.createElement('span');
  label.className = 'role';
  label.textContent = role;
  const body = document.createElement('span');
  body.className = 'content';
  body.textContent = text;
  div.append(label, body);
  $('messages').append(div);
  div.scrollIntoView({ block: 'end' });
  return body;
}

$('chat-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('chat-input').value.trim();
  if (text === '' || running) return;
  $('chat-input').value = '';
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  const reply = addMessage('assistant', '');
  const system = $('system').value.trim();
  const messages = [...(system ? [{ role: 'system', content: system }] : []), ...history];
  try {
    await stream('chat', { messages }, (delta) => (reply.textContent += delta), $('chat-stop'), $('chat-send'));
  } catch (error) {
    reply.parentElement.classList.add('error');
    reply.textContent = error.message;
  }
  history.push({ role: 'assistant', content: reply.textContent });
});
$('chat-input').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $('chat-form').requestSubmit();
  }
});
$('chat-clear').addEventListener('click', () => {
  history.length = 0;
  $('messages').replaceChildren();
  figures({});
  status('');
});

// ---------- Completion ----------

$('completion-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  if (running) return;
  const prompt = $('prompt').value;
  const out = $('completion');
  out.querySelector('.prompt-echo').textContent = prompt;
  const generated = out.querySelector('.generated');
  generated.textContent = '';
  await stream('completion', { prompt }, (delta) => (generated.textContent += delta), $('completion-stop'), $('completion-send')).catch(() => {});
});

// ---------- Repository ----------

async function loadRepository() {
  const response = await api('/chorus/repository');
  if (!response.ok) throw new Error(await errorOf(response));
  repository = await response.json();
  return repository;
}

function table(title, head, rows, name = '') {
  const section = document.createElement('section');
  section.className = `listing ${name}`.trim();
  const h = document.createElement('h2');
  h.textContent = title;
  const t = document.createElement('table');
  const tr = document.createElement('tr');
  for (const cell of head) tr.append(Object.assign(document.createElement('th'), { textContent: cell, scope: 'col' }));
  t.append(tr);
  for (const row of rows) {
    const r = document.createElement('tr');
    for (const cell of row) r.append(Object.assign(document.createElement('td'), { textContent: cell }));
    t.append(r);
  }
  section.append(h, t);
  return section;
}

/** A model's state in words. */
const STATES = { READY: 'ready', LOADING: 'loading…', UNAVAILABLE: 'not loaded: loads on first request' };

function modelRows(repo) {
  return repo.models.map((m) => [m.name, m.engine, m.device, STATES[m.state] ?? m.state, m.random_weights ? 'random' : 'from source']);
}

let polling = null;

/** Draws the repository (graphs only when `redraw`), then keeps the models' states live while the tab shows. */
async function showRepository(redraw = false) {
  const root = $('repository');
  try {
    const repo = await loadRepository();
    showBadge();
    if (!redraw && root.querySelector('section.models')) {
      root.querySelector('section.models').replaceWith(table('models', ['name', 'engine', 'device', 'state', 'weights'], modelRows(repo), 'models'));
    } else drawRepository(root, repo);
  } catch (error) {
    root.textContent = error.message;
  }
  clearTimeout(polling);
  if (!$('panel-repository').hidden) polling = setTimeout(() => void showRepository(), 1500);
}

function drawRepository(root, repo) {
  root.replaceChildren();
  for (const ensemble of repo.ensembles) {
    const section = document.createElement('section');
    section.className = 'ensemble';
    section.dataset.ensemble = ensemble.name;
    const h = document.createElement('h2');
    h.textContent = `ensemble ${ensemble.name}`;
    const p = document.createElement('p');
    p.textContent = ensemble.description ?? '';
    const scroll = document.createElement('div');
    scroll.className = 'graph-scroll';
    scroll.append(drawEnsemble(ensemble));
    section.append(h, p, scroll);
    root.append(section);
  }
  root.append(table('pipelines', ['name', 'runs', 'chat'], repo.pipelines.map((p) => [p.name, p.ensemble ? `ensemble ${p.ensemble}` : `model ${p.model}`, p.chat ? 'yes' : 'no'])));
  root.append(table('models', ['name', 'engine', 'device', 'state', 'weights'], modelRows(repo), 'models'));
}

/** The pipeline's description, and the badge when it runs a model on random weights. */
function showBadge() {
  const pipeline = repository?.pipelines.find((p) => p.name === $('pipeline').value);
  $('pipeline-note').textContent = pipeline?.description ?? '';
  $('random-badge').hidden = pipeline?.random_weights !== true;
}

// ---------- Start: the pipelines ----------

async function start() {
  try {
    const response = await api('/v1/models');
    if (!response.ok) throw new Error(await errorOf(response));
    const { data } = await response.json();
    const select = $('pipeline');
    for (const model of data) select.append(new Option(model.id, model.id));
    const repo = await loadRepository().catch(() => null);
    // Start on the pipeline asked for, else on the first that chats, one on real weights if there is one.
    const wanted = new URLSearchParams(location.search).get('pipeline');
    const chats = repo?.pipelines.filter((p) => p.chat) ?? [];
    const chat = (chats.find((p) => p.random_weights !== true) ?? chats[0])?.name;
    if (wanted && data.some((m) => m.id === wanted)) select.value = wanted;
    else if (chat !== undefined) select.value = chat;
    select.addEventListener('change', showBadge);
    showBadge();
    status(`${data.length} pipelines`);
  } catch (error) {
    status(error.message, true);
  }
}
void start();
