"""Rendering a model's chat template the way Hugging Face's `apply_chat_template` does.

Templates are Jinja2 source shipped inside the GGUF (`tokenizer.chat_template`), so they are
untrusted: they run in Jinja2's immutable sandbox. The globals and filters are the ones HF provides
(`raise_exception`, `strftime_now`, `tojson` that keeps non-ASCII text). A model without a template
falls back to llama.cpp's built-in ChatML.
"""

from __future__ import annotations

import ctypes
import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
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
           add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "", **extra: Any) -> str:
    """The prompt text for a conversation. `extra` reaches the template as variables
    (e.g. `enable_thinking`, `documents`), as in HF."""
    if not source:
        if tools:
            raise InvalidRequest("this model has no chat template, so it cannot take tools")
        return render_chatml(messages, add_generation_prompt)
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


def render_chatml(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """llama.cpp's built-in ChatML template, for models that ship none."""
    import llama_cpp as L

    encoded = [(str(m.get("role", "")).encode(), _text(m.get("content")).encode()) for m in messages]
    chat = (L.llama_chat_message * len(encoded))(*(L.llama_chat_message(r, c) for r, c in encoded))
    size = sum(len(r) + len(c) for r, c in encoded) * 2 + 256
    buf = ctypes.create_string_buffer(size)
    n = L.llama_chat_apply_template(b"chatml", chat, len(encoded), add_generation_prompt, buf, size)
    if n > size:
        buf = ctypes.create_string_buffer(n)
        n = L.llama_chat_apply_template(b"chatml", chat, len(encoded), add_generation_prompt, buf, n)
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


__all__ = ["compile_template", "render", "render_chatml"]
