"""Rendering a model's chat template the way Hugging Face's `apply_chat_template` does.

Templates are Jinja2 source shipped inside the GGUF (`tokenizer.chat_template`), so they are
untrusted: they run in Jinja2's immutable sandbox. The globals and filters are the ones HF provides
(`raise_exception`, `strftime_now`, `tojson` that keeps non-ASCII text). A model without a template
falls back to llama.cpp's built-in template for its architecture (`builtin_for`), or ChatML.
"""

from __future__ import annotations

import ctypes
import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import llama_cpp as L
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localrun.errors import InvalidRequest


def _raise_exception(message: str) -> None:
    raise InvalidRequest(f"chat template: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidRequest(f"chat template has a syntax error: {e}") from None


def render(source: str | None, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "", fallback: str = "chatml",
           **extra: Any) -> str:
    """The prompt text for a conversation. `extra` reaches the template as variables
    (e.g. `enable_thinking`, `documents`), as in HF. Without a template, llama.cpp's built-in
    template named `fallback` renders it."""
    if not source:
        if tools:
            raise InvalidRequest("this model has no chat template, so it cannot take tools")
        return render_builtin(fallback, messages, add_generation_prompt)
    context = dict(extra, messages=messages, add_generation_prompt=add_generation_prompt,
                   bos_token=bos_token, eos_token=eos_token)
    if tools is not None:
        context["tools"] = tools
    try:
        return compile_template(source).render(**context)
    except InvalidRequest:  # raise_exception: the template refused the conversation
        raise
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError) as e:
        raise InvalidRequest(f"chat template failed: {e}") from None


def builtin_templates() -> list[str]:
    """Names of llama.cpp's built-in chat templates."""
    n = L.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * n)()
    L.llama_chat_builtin_templates(names, n)
    return [name.decode() for name in names]


def builtin_for(architecture: str | None) -> str:
    """The built-in template for a model architecture without its own: "gemma3" -> "gemma",
    "phi3" -> "phi3"; ChatML when llama.cpp has none by that name."""
    names = set(builtin_templates())
    arch = (architecture or "").lower()
    for candidate in (arch, arch.rstrip("0123456789")):
        if candidate in names:
            return candidate
    return "chatml"


def render_builtin(name: str, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """One of llama.cpp's built-in templates, for models that ship none."""
    encoded = [(str(m.get("role", "")).encode(), _text(m.get("content")).encode()) for m in messages]
    chat = (L.llama_chat_message * len(encoded))(*(L.llama_chat_message(r, c) for r, c in encoded))
    size = sum(len(r) + len(c) for r, c in encoded) * 2 + 256
    buf = ctypes.create_string_buffer(size)
    n = L.llama_chat_apply_template(name.encode(), chat, len(encoded), add_generation_prompt, buf, size)
    if n > size:
        buf = ctypes.create_string_buffer(n)
        n = L.llama_chat_apply_template(name.encode(), chat, len(encoded), add_generation_prompt, buf, n)
    if n < 0:
        raise InvalidRequest("llama.cpp could not apply its built-in chat template")
    return buf.raw[:n].decode("utf-8", "replace")


def _text(content: Any) -> str:
    """Message content as text: a string, or OpenAI-style parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


__all__ = ["builtin_for", "builtin_templates", "compile_template", "render", "render_builtin"]
