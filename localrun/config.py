"""Every `LOCALRUN_*` setting, read in this one module and listed by `localrun serve --help`.

A leaf module: anyone may import it. Each setting is declared once in `SETTINGS` (name, default,
help); `Config.from_env()` parses them into typed fields, and `env_help()` renders the list.
Precedence everywhere: a command-line flag or request field, then the environment, then the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from localrun.errors import UsageError
from localrun.sampling import MAX_DRAFT

DEFAULT_PORT = 11435  # Ollama's 11434 + 1: both can run side by side.


@dataclass(frozen=True, slots=True)
class Setting:
    env: str
    default: str
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("LOCALRUN_HOME", "", "Root for models, config, logs and runtime files (default: platformdirs)."),
    Setting("LOCALRUN_HOST", f"127.0.0.1:{DEFAULT_PORT}", "Daemon address: bind address for serve, target for the CLI."),
    Setting("LOCALRUN_MIRROR", "", "Rewrite the host of every model download URL (e.g. http://127.0.0.1:8000)."),
    Setting("LOCALRUN_ALLOW_PRIVATE_PULL", "", "Set to 1 to let /api/pull fetch from loopback, link-local and private "
                                           "addresses (refused by default; the mirror's host is always allowed)."),
    Setting("LOCALRUN_API_KEY", "", "API key(s), comma-separated, or @FILE with one key per line."),
    Setting("LOCALRUN_ORIGINS", "", "Extra allowed CORS origins, comma-separated (loopback origins are always allowed)."),
    Setting("LOCALRUN_KEEP_ALIVE", "5m", "How long an idle model stays loaded (duration, seconds; negative = forever)."),
    Setting("LOCALRUN_MAX_LOADED_MODELS", "3", "Most models loaded at once; the least recently used idle one is evicted."),
    Setting("LOCALRUN_MEMORY_BUDGET", "0", "Memory for loaded models in bytes or with a unit (8GiB); 0 = 75% of RAM."),
    Setting("LOCALRUN_MAX_QUEUE", "64", "Requests waiting per model before new ones get 503 with Retry-After."),
    Setting("LOCALRUN_MAX_BODY", "32MiB", "Largest request body (bytes or with a unit); bigger ones get 413."),
    Setting("LOCALRUN_MAX_MESSAGES", "4096", "Most messages in one chat request."),
    Setting("LOCALRUN_MAX_TOKENS", "1048576", "Largest max_tokens / num_predict a request may ask for."),
    Setting("LOCALRUN_MAX_INPUTS", "2048", "Most inputs (embeddings, prompts, choices) in one request."),
    Setting("LOCALRUN_PARALLEL", "4", "Sequence slots per model (concurrent requests batched together)."),
    Setting("LOCALRUN_CTX_SIZE", "4096", "Context length per slot, in tokens."),
    Setting("LOCALRUN_BATCH_SIZE", "512", "Most tokens evaluated in one engine step (decode + prefill chunks)."),
    Setting("LOCALRUN_THREADS", "auto", "CPU threads for decoding; auto picks from the cores and measured load."),
    Setting("LOCALRUN_FLASH_ATTN", "auto", "Flash attention: on, off or auto."),
    Setting("LOCALRUN_KV_CACHE_TYPE", "f16", "KV cache type: f16, q8_0 or q4_0 (quantized types need flash attention)."),
    Setting("LOCALRUN_SPECULATIVE", "off", "Speculative decoding by prompt lookup: off, on (16 tokens) or the most "
                                           "tokens drafted per step; requests may choose their own."),
    Setting("LOCALRUN_GPU_LAYERS", "auto", "Layers to offload to the GPU when the build supports it (auto = all)."),
    Setting("LOCALRUN_UI", "on", "Serve the web chat page at / (on or off; `serve --no-ui` turns it off too)."),
    Setting("LOCALRUN_DEBUG", "", "Set to 1 for tracebacks and debug logs."),
)

_BY_ENV = {s.env: s for s in SETTINGS}


def raw(env: str) -> str:
    """The environment's value of a declared setting, or its default."""
    setting = _BY_ENV[env]
    value = os.environ.get(env, "")
    return value if value.strip() else setting.default


def _int(env: str) -> int:
    value = raw(env)
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{env} must be an integer, got {value!r}") from None


_SWITCH = {"on": True, "1": True, "true": True, "yes": True, "off": False, "0": False, "false": False, "no": False}


def _on_off(env: str) -> bool:
    value = raw(env).strip().lower()
    if value not in _SWITCH:
        raise UsageError(f"{env} must be on or off, got {value!r}")
    return _SWITCH[value]


@dataclass(frozen=True, slots=True)
class Config:
    """The settings the daemon and runners use, parsed once."""

    host: str
    mirror: str
    api_keys: tuple[str, ...]
    origins: tuple[str, ...]
    keep_alive: str
    max_loaded_models: int
    memory_budget: str
    max_queue: int
    max_body: str
    max_messages: int
    max_tokens: int
    max_inputs: int
    parallel: int
    ctx_size: int
    batch_size: int
    threads: str
    flash_attn: str
    kv_cache_type: str
    speculative: int
    gpu_layers: str
    ui: bool
    debug: bool

    @classmethod
    def from_env(cls) -> Config:
        return cls(
            host=raw("LOCALRUN_HOST"),
            mirror=raw("LOCALRUN_MIRROR"),
            api_keys=_api_keys(raw("LOCALRUN_API_KEY")),
            origins=_csv(raw("LOCALRUN_ORIGINS")),
            keep_alive=raw("LOCALRUN_KEEP_ALIVE"),
            max_loaded_models=_int("LOCALRUN_MAX_LOADED_MODELS"),
            memory_budget=raw("LOCALRUN_MEMORY_BUDGET"),
            max_queue=_int("LOCALRUN_MAX_QUEUE"),
            max_body=raw("LOCALRUN_MAX_BODY"),
            max_messages=_int("LOCALRUN_MAX_MESSAGES"),
            max_tokens=_int("LOCALRUN_MAX_TOKENS"),
            max_inputs=_int("LOCALRUN_MAX_INPUTS"),
            parallel=_int("LOCALRUN_PARALLEL"),
            ctx_size=_int("LOCALRUN_CTX_SIZE"),
            batch_size=_int("LOCALRUN_BATCH_SIZE"),
            threads=raw("LOCALRUN_THREADS"),
            flash_attn=raw("LOCALRUN_FLASH_ATTN"),
            kv_cache_type=check_kv_cache_type(raw("LOCALRUN_KV_CACHE_TYPE"), raw("LOCALRUN_FLASH_ATTN")),
            speculative=parse_speculative(raw("LOCALRUN_SPECULATIVE")),
            gpu_layers=raw("LOCALRUN_GPU_LAYERS"),
            ui=_on_off("LOCALRUN_UI"),
            debug=raw("LOCALRUN_DEBUG") not in ("", "0", "false"),
        )


KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")


def check_kv_cache_type(kv_cache_type: str, flash_attn: str) -> str:
    """Refuse at start what llama.cpp would refuse at the first model load: an unknown type, or a
    quantized KV cache without flash attention (llama.cpp needs it for a quantized V cache)."""
    if kv_cache_type not in KV_CACHE_TYPES:
        raise UsageError(f"KV cache type must be one of {', '.join(KV_CACHE_TYPES)}, got {kv_cache_type!r}")
    if kv_cache_type != "f16" and flash_attn == "off":
        raise UsageError(f"a {kv_cache_type} KV cache needs flash attention: set LOCALRUN_FLASH_ATTN to auto or on")
    return kv_cache_type


SPECULATIVE_ON = 16  # the draft length "on" means


def parse_speculative(value: str) -> int:
    """The most tokens drafted per step: "off" (0), "on" (SPECULATIVE_ON) or a number up to MAX_DRAFT."""
    words = {"off": 0, "false": 0, "no": 0, "on": SPECULATIVE_ON, "true": SPECULATIVE_ON, "yes": SPECULATIVE_ON}
    text = value.strip().lower()
    if text in words:
        return words[text]
    if text.isdigit() and int(text) <= MAX_DRAFT:
        return int(text)
    raise UsageError(f"speculative decoding must be off, on or a draft length from 0 to {MAX_DRAFT}, got {value!r}")


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _api_keys(value: str) -> tuple[str, ...]:
    """Keys inline (comma-separated) or, with a leading @, one per line in a file."""
    if value.startswith("@"):
        try:
            with open(os.path.expanduser(value[1:]), encoding="utf-8") as f:
                return tuple(line.strip() for line in f if line.strip() and not line.startswith("#"))
        except OSError as e:
            raise UsageError(f"LOCALRUN_API_KEY: cannot read key file: {e}") from None
    return _csv(value)


def env_help() -> str:
    """The settings as lines for `serve --help`."""
    width = max(len(s.env) for s in SETTINGS)
    return "\n".join(f"{s.env:<{width}}  {s.help}" + (f" [default: {s.default}]" if s.default else "") for s in SETTINGS)


__all__ = ["Config", "SETTINGS", "Setting", "DEFAULT_PORT", "KV_CACHE_TYPES", "SPECULATIVE_ON", "check_kv_cache_type",
           "env_help", "parse_speculative", "raw"]
