// The daemon's public HTTP API, as any other client uses it (paths relative to the page, so it also
// works behind a reverse proxy that serves the daemon under a sub-path): JSON calls, server-sent events
// (/v1/chat/completions) and NDJSON (/api/pull). The API key travels only in the Authorization
// header, never in a URL; it is kept in sessionStorage, or in localStorage when the user asks.

const KEY = 'localrun.apiKey';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let keyPrompt = async () => false;

/** Who asks the user for a key after a 401: `prompt(reason)` resolves true once a key is stored. */
export function onKeyNeeded(prompt) {
  keyPrompt = prompt;
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || '';
}

export function storeKey(key, remember) {
  sessionStorage.setItem(KEY, key);
  if (remember) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

/** fetch with the key; a 401 asks for a key and tries again; any other error status throws ApiError. */
export async function request(path, { method = 'GET', body, signal } = {}) {
  for (;;) {
    const headers = {};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, {
      method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      const reason = key ? 'The server refused that key.' : 'This server needs an API key (LOCALRUN_API_KEY).';
      if (await keyPrompt(reason)) continue;
    }
    if (!response.ok) throw new ApiError(response.status, await errorMessage(response));
    return response;
  }
}

export async function json(path, options) {
  return (await request(path, options)).json();
}

async function errorMessage(response) {
  try {
    const data = await response.json();
    const error = data.error ?? data;
    return typeof error === 'string' ? error : error.message || JSON.stringify(error);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

/** The body's lines as they arrive. */
export async function* lines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const parts = buffer.split('\n');
    buffer = parts.pop();
    yield* parts;
  }
  buffer += decoder.decode();
  if (buffer) yield buffer;
}

/** Server-sent events' data objects until [DONE]; an error event throws. */
export async function* events(response) {
  for await (const line of lines(response)) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '[DONE]') return;
    yield failIfError(JSON.parse(data));
  }
}

/** NDJSON objects; an {"error": ...} line throws. */
export async function* ndjson(response) {
  for await (const line of lines(response)) {
    if (line.trim()) yield failIfError(JSON.parse(line));
  }
}

function failIfError(data) {
  if (data && data.error) {
    throw new ApiError(0, typeof data.error === 'string' ? data.error : data.error.message || 'error');
  }
  return data;
}
