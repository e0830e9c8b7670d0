// The chat page: conversations on the left, the current one on the right, answers streamed from
// /v1/chat/completions. Text from the model, the user or an imported file reaches the DOM as
// textContent or through render.js's sanitizer, never as raw HTML.

import * as api from './api.js';
import * as store from './conversations.js';
import { copyText, flash, markdown, splitThinking, statsLine } from './render.js';

const $ = (id) => document.getElementById(id);
const THEMES = ['auto', 'light', 'dark'];
const state = { conversations: store.load(), current: null, models: [], loaded: new Map(), controller: null };

// --- small DOM helpers ------------------------------------------------------------------------

function el(tag, className = '', text = '') {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

function button(label, onClick, className = '') {
  const node = el('button', className, label);
  node.type = 'button';
  node.addEventListener('click', onClick);
  return node;
}

function toast(message) {
  const box = $('toast');
  box.textContent = message;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 5000);
}

// --- conversations ----------------------------------------------------------------------------

function current() {
  return state.conversations.find((c) => c.id === state.current);
}

function persist(conversation = current()) {
  if (conversation) conversation.updated = Date.now();
  if (!store.save(state.conversations)) toast('The browser storage is full: export, then delete old conversations.');
}

function select(id) {
  state.current = id;
  localStorage.setItem('localrun.current', id);
  document.body.classList.remove('nav-open');
  renderAll();
}

function newChat() {
  const empty = state.conversations.find((c) => !c.messages.length);
  if (empty) return select(empty.id);
  const conversation = store.create($('model').value);
  state.conversations.unshift(conversation);
  select(conversation.id);
  $('input').focus();
}

function remove(conversation) {
  if (!confirm(`Delete "${store.title(conversation)}"?`)) return;
  state.conversations = state.conversations.filter((c) => c !== conversation);
  if (!state.conversations.length) state.conversations.push(store.create($('model').value));
  store.save(state.conversations);
  select(state.conversations[0].id);
}

// --- rendering --------------------------------------------------------------------------------

function renderAll() {
  // a streaming redraw still waiting for its frame would replace the finished answer drawn here
  cancelAnimationFrame(renderStreaming.frame);
  renderStreaming.frame = 0;
  renderList();
  renderSettings();
  const conversation = current();
  const nodes = conversation.messages.map((m, i) => messageView(conversation, m, i, false));
  if (!nodes.length) nodes.push(el('p', 'hint', 'Pick a model and write a message.'));
  $('messages').replaceChildren(...nodes);
  $('model').value = conversation.model || $('model').value;
  scrollDown(true);
}

function renderList() {
  const items = state.conversations.map((conversation) => {
    const item = el('li', conversation.id === state.current ? 'active' : '');
    item.append(button(store.title(conversation), () => select(conversation.id), 'title'),
      button('×', () => remove(conversation), 'delete'));
    item.lastChild.setAttribute('aria-label', 'Delete conversation');
    return item;
  });
  $('conversations').replaceChildren(...items);
}

function messageView(conversation, message, index, streaming) {
  const view = el('article', `msg ${message.role}`);
  view.append(el('div', 'who', message.role === 'user' ? 'You' : message.model || 'assistant'));
  if (message.role === 'user') {
    view.append(el('div', 'body plain', message.content), actions([button('Edit', () => edit(view, index))]));
    return view;
  }
  const { thinking, answer } = splitThinking(message.content, message.reasoning);
  if (thinking) {
    const details = collapsible('Thinking', markdown(thinking, !streaming), 'thinking');
    // open while only thinking streams in (or nothing would seem to happen), closed once the answer starts
    if (streaming && !answer) {
      details.open = true;
      details.dataset.auto = 'yes';
    }
    view.append(details);
  }
  const body = el('div', 'body md');
  body.append(markdown(answer, !streaming));
  view.append(body);
  for (const call of message.tool_calls || []) view.append(toolCallView(call));
  if (message.error) view.append(el('div', 'error', message.error));
  if (message.stopped) view.append(el('div', 'note', 'Stopped.'));
  view.append(el('div', 'stats', statsLine(message.stats)));
  if (streaming) return view;
  const last = index === conversation.messages.length - 1;
  const copy = button('Copy', () => copyText(answer).then(() => flash(copy, 'Copied')));
  view.append(actions(last ? [copy, button('Regenerate', regenerate)] : [copy]));
  return view;
}

function collapsible(label, content, className) {
  const details = el('details', className);
  const body = el('div', 'md');
  body.append(content);
  details.append(el('summary', '', label), body);
  return details;
}

function toolCallView(call) {
  let args = call.function.arguments;
  try {
    args = JSON.stringify(JSON.parse(args), null, 2);
  } catch { /* shown as it came */ }
  const details = collapsible(`Tool call: ${call.function.name}`, el('pre', '', args), 'tool-call');
  details.open = true;
  return details;
}

function actions(buttons) {
  const row = el('div', 'actions');
  row.append(...buttons);
  buttons.forEach((b) => { b.disabled = Boolean(state.controller); });
  return row;
}

/** Re-render the message being streamed, at most once per frame. */
function renderStreaming() {
  if (renderStreaming.frame) return;
  renderStreaming.frame = requestAnimationFrame(() => {
    renderStreaming.frame = 0;
    const conversation = current();
    const views = $('messages').querySelectorAll('article.msg');
    const old = views[views.length - 1];
    if (!conversation || !old) return;
    const index = conversation.messages.length - 1;
    const stick = nearBottom();
    const view = messageView(conversation, conversation.messages[index], index, true);
    const before = old.querySelector('details.thinking');
    if (before?.open && !before.dataset.auto) view.querySelector('details.thinking').open = true;  // the user's
    old.replaceWith(view);
    scrollDown(stick);
  });
}

function nearBottom() {
  const box = $('messages');
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function scrollDown(yes) {
  if (yes) $('messages').scrollTop = $('messages').scrollHeight;
}

// --- generating -------------------------------------------------------------------------------

function send() {
  const text = $('input').value.trim();
  const conversation = current();
  if (!text || state.controller) return;
  conversation.messages.push({ role: 'user', content: text });
  $('input').value = '';
  grow($('input'));
  generate(conversation);
}

function regenerate() {
  const conversation = current();
  if (conversation.messages.at(-1)?.role === 'assistant') conversation.messages.pop();
  generate(conversation);
}

function edit(view, index) {
  const conversation = current();
  const area = el('textarea', 'edit');
  area.value = conversation.messages[index].content;
  const resend = () => {
    if (!area.value.trim() || state.controller) return;
    conversation.messages = conversation.messages.slice(0, index);
    conversation.messages.push({ role: 'user', content: area.value.trim() });
    generate(conversation);
  };
  area.addEventListener('keydown', (event) => enterSends(event, resend));
  view.querySelector('.body').replaceWith(area);
  view.querySelector('.actions').replaceChildren(button('Send', resend), button('Cancel', renderAll));
  area.focus();
}

function requestFields(conversation) {
  let extra = {};
  if (conversation.extra.trim()) {
    extra = JSON.parse(conversation.extra);
    if (!extra || typeof extra !== 'object' || Array.isArray(extra)) throw new Error('must be a JSON object');
  }
  return { ...extra, ...conversation.settings };
}

async function generate(conversation) {
  let fields;
  try {
    fields = requestFields(conversation);
  } catch (e) {
    toast(`More request fields: ${e.message}`);
    return renderAll();
  }
  const model = conversation.model || $('model').value;
  if (!model) {
    toast('No model to answer: pull one first.');
    return renderAll();
  }
  conversation.model = model;
  const messages = history(conversation);
  const reply = { role: 'assistant', content: '', model };
  conversation.messages.push(reply);
  state.controller = new AbortController();
  busy(true);
  renderAll();
  persist(conversation);
  try {
    const body = { ...fields, model, messages, stream: true, stream_options: { include_usage: true } };
    const { signal } = state.controller;
    const response = await api.request('v1/chat/completions', { method: 'POST', body, signal });
    for await (const chunk of api.events(response)) {
      absorb(reply, chunk);
      if (conversation === current()) renderStreaming();
    }
  } catch (e) {
    if (e.name === 'AbortError') reply.stopped = true;
    else reply.error = e.message;
  } finally {
    state.controller = null;
    await refreshModels();
    if (reply.stats) reply.stats.context_length = state.loaded.get(model)?.context_length;
    persist(conversation);
    if (conversation === current()) renderAll();
    busy(false);
  }
}

/** The messages to send: the system prompt, then each turn; earlier answers without their thinking
 * (as chat templates drop it), and failed answers with no text left out. */
function history(conversation) {
  const turns = conversation.messages.filter((m) => m.role === 'user' || m.content).map((m) => ({
    role: m.role, content: m.role === 'assistant' ? splitThinking(m.content).answer : m.content,
  }));
  return conversation.system ? [{ role: 'system', content: conversation.system }, ...turns] : turns;
}

/** One chunk of the stream into the reply: text, thinking, tool calls, and the final usage. */
function absorb(reply, chunk) {
  for (const choice of chunk.choices || []) {
    const delta = choice.delta || {};
    if (delta.content) reply.content += delta.content;
    if (delta.reasoning_content) reply.reasoning = (reply.reasoning || '') + delta.reasoning_content;
    for (const call of delta.tool_calls || []) {
      reply.tool_calls ||= [];
      const index = call.index ?? reply.tool_calls.length;
      const slot = (reply.tool_calls[index] ||= { function: { name: '', arguments: '' } });
      slot.function.name += call.function?.name || '';
      slot.function.arguments += call.function?.arguments || '';
    }
  }
  if (chunk.usage) {
    reply.stats = {
      prompt_tokens: chunk.usage.prompt_tokens,
      cached_tokens: chunk.usage.prompt_tokens_details?.cached_tokens ?? chunk.timings?.cache_n ?? 0,
      completion_tokens: chunk.usage.completion_tokens,
      tokens_per_second: chunk.timings?.predicted_per_second ?? 0,
    };
  }
}

function busy(yes) {
  $('send').hidden = yes;
  $('stop').hidden = !yes;
  document.body.classList.toggle('busy', yes);
}

// --- models, pulling --------------------------------------------------------------------------

async function refreshLoaded() {
  try {
    const ps = await api.json('api/ps');
    state.loaded = new Map(ps.models.map((m) => [m.name, m]));
  } catch { /* the marks stay as they were */ }
}

async function refreshModels() {
  try {
    const [models] = await Promise.all([api.json('v1/models'), refreshLoaded()]);
    state.models = models.data.map((m) => m.id);
  } catch (e) {
    toast(`Cannot list models: ${e.message}`);
  }
  const select = $('model');
  const options = state.models.map((id) => {
    const option = el('option', '', state.loaded.has(id) ? `${id} ● loaded` : id);
    option.value = id;
    return option;
  });
  if (!options.length) options.push(Object.assign(el('option', '', 'no models: pull one'), { value: '' }));
  select.replaceChildren(...options);
  const wanted = current().model || localStorage.getItem('localrun.model');
  if (wanted && state.models.includes(wanted)) select.value = wanted;
}

function pickModel() {
  const conversation = current();
  conversation.model = $('model').value;
  localStorage.setItem('localrun.model', conversation.model);
  persist();
}

async function pull(event) {
  event.preventDefault();
  const name = $('pull-name').value.trim();
  const bar = $('pull-progress');
  const status = $('pull-status');
  if (!name) return;
  $('pull-button').disabled = true;
  bar.hidden = false;
  bar.removeAttribute('value');
  status.textContent = `Pulling ${name}…`;
  try {
    const response = await api.request('api/pull', { method: 'POST', body: { model: name, stream: true } });
    for await (const progress of api.ndjson(response)) {
      if (progress.total) {
        bar.value = progress.completed / progress.total;
        status.textContent = `${progress.status}: ${Math.floor(100 * bar.value)}% of ${megabytes(progress.total)}`;
      } else {
        status.textContent = progress.status;
      }
    }
    bar.hidden = true;
    $('pull-name').value = '';
    await refreshModels();  // never throws; "Pulled" shows once the new model is in the list
    status.textContent = `Pulled ${name}.`;
  } catch (e) {
    status.textContent = `Pull failed: ${e.message}`;
  } finally {
    bar.hidden = true;
    $('pull-button').disabled = false;
  }
}

function megabytes(bytes) {
  return `${(bytes / 1e6).toFixed(bytes < 1e7 ? 1 : 0)} MB`;
}

// --- settings, import/export, theme, key ------------------------------------------------------

function renderSettings() {
  const conversation = current();
  $('system').value = conversation.system;
  $('extra').value = conversation.extra;
  for (const name of store.SETTINGS) $(name).value = conversation.settings[name] ?? '';
}

function bindSettings() {
  $('system').addEventListener('input', () => { current().system = $('system').value; persist(); });
  $('extra').addEventListener('input', () => { current().extra = $('extra').value; persist(); });
  for (const name of store.SETTINGS) {
    $(name).addEventListener('input', () => {
      const value = $(name).value;
      if (value === '' || !Number.isFinite(Number(value))) delete current().settings[name];
      else current().settings[name] = Number(value);
      persist();
    });
  }
  $('settings').addEventListener('submit', (event) => event.preventDefault());
  $('settings-toggle').addEventListener('click', () => {
    $('settings').hidden = !$('settings').hidden;
    $('settings-toggle').setAttribute('aria-expanded', String(!$('settings').hidden));
  });
}

function exportAll() {
  const blob = new Blob([store.exportJson(state.conversations)], { type: 'application/json' });
  const link = el('a');
  link.href = URL.createObjectURL(blob);
  link.download = `localrun-conversations-${new Date().toISOString().slice(0, 10)}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

async function importFile() {
  const file = $('import').files[0];
  if (!file) return;
  try {
    const imported = store.parseImport(await file.text());
    state.conversations = store.merge(state.conversations, imported);
    store.save(state.conversations);
    if (imported.length) select(imported[0].id);
    toast(`Imported ${imported.length} conversation(s) from ${file.name}.`);
  } catch (e) {
    toast(`Cannot import ${file.name}: ${e.message}`);
  } finally {
    $('import').value = '';
  }
}

function applyTheme(theme) {
  const root = document.documentElement;
  if (theme === 'auto') delete root.dataset.theme;
  else root.dataset.theme = theme;
  $('theme').textContent = `Theme: ${theme}`;
  localStorage.setItem('localrun.theme', theme);
}

function nextTheme() {
  const now = localStorage.getItem('localrun.theme') || 'auto';
  applyTheme(THEMES[(THEMES.indexOf(now) + 1) % THEMES.length]);
}

const keyDialog = { pending: null, resolve: null };

/** Ask for the API key once, however many requests got a 401 meanwhile. */
function askKey(reason) {
  if (!keyDialog.pending) {
    keyDialog.pending = new Promise((resolve) => { keyDialog.resolve = resolve; });
    $('key-reason').textContent = reason;
    $('key').value = '';
    $('key-dialog').showModal();
  }
  return keyDialog.pending;
}

function closeKeyDialog(ok) {
  if ($('key-dialog').open) $('key-dialog').close();
  const resolve = keyDialog.resolve;
  keyDialog.pending = keyDialog.resolve = null;
  if (resolve) resolve(ok);
}

function bindKeyDialog() {
  api.onKeyNeeded(askKey);
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = $('key').value.trim();
    if (!key) return;
    api.storeKey(key, $('key-remember').checked);
    closeKeyDialog(true);
  });
  $('key-cancel').addEventListener('click', () => closeKeyDialog(false));
  $('key-dialog').addEventListener('cancel', () => closeKeyDialog(false));  // Escape
}

// --- keyboard and start -----------------------------------------------------------------------

function enterSends(event, action) {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    action();
  }
}

function grow(area) {
  area.style.height = 'auto';
  area.style.height = `${Math.min(area.scrollHeight, 240)}px`;
}

function bind() {
  $('composer').addEventListener('submit', (event) => { event.preventDefault(); send(); });
  $('input').addEventListener('keydown', (event) => enterSends(event, send));
  $('input').addEventListener('input', () => grow($('input')));
  $('stop').addEventListener('click', () => state.controller?.abort());
  document.addEventListener('keydown', (event) => { if (event.key === 'Escape') state.controller?.abort(); });
  $('new-chat').addEventListener('click', newChat);
  $('model').addEventListener('change', pickModel);
  $('pull-form').addEventListener('submit', pull);
  $('export').addEventListener('click', exportAll);
  $('import-button').addEventListener('click', () => $('import').click());
  $('import').addEventListener('change', importFile);
  $('theme').addEventListener('click', nextTheme);
  $('menu').addEventListener('click', () => document.body.classList.toggle('nav-open'));
  $('scrim').addEventListener('click', () => document.body.classList.remove('nav-open'));
  bindSettings();
  bindKeyDialog();
}

function start() {
  bind();
  applyTheme(localStorage.getItem('localrun.theme') || 'auto');
  if (!state.conversations.length) state.conversations.push(store.create(localStorage.getItem('localrun.model') || ''));
  const last = localStorage.getItem('localrun.current');
  state.current = state.conversations.some((c) => c.id === last) ? last : state.conversations[0].id;
  renderAll();
  refreshModels().then(() => { $('input').focus(); document.body.dataset.ready = 'true'; });
}

start();
