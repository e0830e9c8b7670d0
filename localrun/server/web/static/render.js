// Model output to DOM: Markdown (marked) -> HTML sanitized by DOMPurify -> code highlighted by
// highlight.js, with a copy button on each code block. Model text is untrusted: nothing reaches the
// page without the sanitizer, and the page's Content-Security-Policy refuses inline script besides.
//
// Raw HTML in the Markdown is shown as the text the model wrote, as chat pages usually do: the user
// sees `<img src=x onerror=...>` rather than an element, and no handler attribute is ever parsed
// (even the sanitizer's inert parse of one makes the browser report a CSP violation).

/* global marked, DOMPurify, hljs */

const ENTITIES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
marked.use({ renderer: { html: ({ text }) => text.replace(/[&<>"']/g, (c) => ENTITIES[c]) } });

const PURIFY = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed', 'link', 'meta'],
  FORBID_ATTR: ['style', 'srcset'],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  // An image URL in model output is a way out (a tracking pixel, a GET the user did not ask for):
  // only inline data: images are shown.
  if (node.tagName === 'IMG' && !/^data:image\//i.test(node.getAttribute('src') || '')) node.removeAttribute('src');
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

/** Sanitized DOM for Markdown `text`; `final` adds highlighting and copy buttons (skipped while streaming). */
export function markdown(text, final) {
  const fragment = DOMPurify.sanitize(marked.parse(text, { gfm: true }), PURIFY);
  if (final) fragment.querySelectorAll('pre > code').forEach(decorate);
  return fragment;
}

function decorate(code) {
  const language = (code.className.match(/language-([\w+#.-]+)/) || [])[1];
  const source = code.textContent;
  const result = language && hljs.getLanguage(language)
    ? hljs.highlight(source, { language, ignoreIllegals: true })
    : hljs.highlightAuto(source);
  code.replaceChildren(DOMPurify.sanitize(result.value, PURIFY));
  code.classList.add('hljs');
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'copy';
  copy.textContent = 'Copy';
  copy.addEventListener('click', () => copyText(source).then(() => flash(copy, 'Copied')));
  code.parentElement.prepend(copy);
}

export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = Object.assign(document.createElement('textarea'), { value: text });
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

export function flash(button, label) {
  const before = button.textContent;
  button.textContent = label;
  setTimeout(() => { button.textContent = before; }, 1200);
}

/** A reply's thinking and answer: `reasoning_content` when the server sends it apart, else a
 * leading <think>…</think> block in the text (the block may still be open while streaming). */
export function splitThinking(content, reasoning = '') {
  const start = content.match(/^\s*<think>/);
  if (!start) return { thinking: reasoning, answer: content };
  const rest = content.slice(start[0].length);
  const end = rest.indexOf('</think>');
  if (end < 0) return { thinking: reasoning + rest, answer: '' };
  return { thinking: reasoning + rest.slice(0, end), answer: rest.slice(end + '</think>'.length).trimStart() };
}

/** The line under an answer: tokens, speed, prompt and cache, context use. */
export function statsLine(stats) {
  if (!stats || stats.completion_tokens === undefined) return '';
  const parts = [`${stats.completion_tokens} tokens`];
  if (stats.tokens_per_second) parts.push(`${stats.tokens_per_second.toFixed(1)} tok/s`);
  if (stats.prompt_tokens !== undefined) {
    const cached = stats.cached_tokens ? ` (${stats.cached_tokens} cached)` : '';
    parts.push(`prompt ${stats.prompt_tokens}${cached}`);
  }
  const used = (stats.prompt_tokens || 0) + stats.completion_tokens;
  if (stats.context_length) {
    parts.push(`context ${used} / ${stats.context_length} (${Math.round((100 * used) / stats.context_length)}%)`);
  }
  return parts.join(' · ');
}
