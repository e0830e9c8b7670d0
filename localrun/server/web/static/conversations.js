// Conversations kept in the browser's localStorage, and their JSON export and import.
// Everything read back (storage or an imported file) goes through `normalize`: only known fields of
// the right type survive, so a hand-edited or hostile file cannot smuggle in anything but text.

const STORE = 'localrun.conversations';
const FORMAT = 'localrun.conversations';
export const SETTINGS = ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty', 'max_tokens', 'seed'];
const STATS = ['prompt_tokens', 'cached_tokens', 'completion_tokens', 'tokens_per_second', 'context_length'];

export function load() {
  try {
    const data = JSON.parse(localStorage.getItem(STORE) || '[]');
    return Array.isArray(data) ? data.map(normalize).filter(Boolean) : [];
  } catch {
    return [];
  }
}

/** Write every conversation; false when the browser's storage is full. */
export function save(list) {
  try {
    localStorage.setItem(STORE, JSON.stringify(list));
    return true;
  } catch {
    return false;
  }
}

export function create(model) {
  return { id: newId(), title: '', model, system: '', settings: {}, extra: '', messages: [], updated: Date.now() };
}

export function title(conversation) {
  if (conversation.title) return conversation.title;
  const first = conversation.messages.find((m) => m.role === 'user');
  return first ? first.content.replace(/\s+/g, ' ').trim().slice(0, 60) || 'New chat' : 'New chat';
}

/** Every conversation that has a message, as a file `parseImport` reads back. */
export function exportJson(list) {
  const conversations = list.filter((c) => c.messages.length);
  return JSON.stringify({ format: FORMAT, version: 1, conversations }, null, 2);
}

/** The conversations in an export file's text (or a bare array of them); throws on anything else. */
export function parseImport(text) {
  const data = JSON.parse(text);
  const list = Array.isArray(data) ? data : data && data.conversations;
  if (!Array.isArray(list)) throw new Error('not a conversations export (no "conversations" list)');
  const conversations = list.map(normalize).filter(Boolean);
  if (list.length && !conversations.length) throw new Error('no conversation in the file could be read');
  return conversations;
}

/** `imported` merged into `list`: one with a known id replaces the stored one. */
export function merge(list, imported) {
  const ids = new Set(imported.map((c) => c.id));
  return [...imported, ...list.filter((c) => !ids.has(c.id))].sort((a, b) => b.updated - a.updated);
}

export function normalize(raw) {
  if (!raw || typeof raw !== 'object' || !Array.isArray(raw.messages)) return null;
  return {
    id: text(raw.id) || newId(),
    title: text(raw.title),
    model: text(raw.model),
    system: text(raw.system),
    settings: numbers(raw.settings, SETTINGS),
    extra: text(raw.extra),
    messages: raw.messages.map(message).filter(Boolean),
    updated: Number.isFinite(raw.updated) ? raw.updated : Date.now(),
  };
}

function message(raw) {
  if (!raw || (raw.role !== 'user' && raw.role !== 'assistant')) return null;
  const out = { role: raw.role, content: text(raw.content) };
  for (const field of ['reasoning', 'model', 'error']) if (text(raw[field])) out[field] = text(raw[field]);
  if (raw.stopped === true) out.stopped = true;
  if (Array.isArray(raw.tool_calls)) out.tool_calls = raw.tool_calls.map(toolCall).filter(Boolean);
  if (raw.stats && typeof raw.stats === 'object') out.stats = numbers(raw.stats, STATS);
  return out;
}

function toolCall(raw) {
  const fn = raw && raw.function;
  return fn && typeof fn === 'object' ? { function: { name: text(fn.name), arguments: text(fn.arguments) } } : null;
}

function numbers(raw, names) {
  const out = {};
  for (const name of names) if (raw && Number.isFinite(raw[name])) out[name] = raw[name];
  return out;
}

function text(value) {
  return typeof value === 'string' ? value : '';
}

function newId() {
  return crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}
