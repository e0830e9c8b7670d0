"""Every `LOCALRUN_*` setting, read and checked in this one module and listed by `localrun serve --help`.

A leaf module: anyone may import it. Each setting is declared once in `SETTINGS`: its variable, its
default, its help line and the `Rule` that parses it and says what it accepts. `Settings.from_env()`
turns them all into one typed object at start-up, so a bad value stops `serve` with exit 2 and one
line naming the variable, before any model loads; `read()` gives one setting to a command that needs
only that one. `EngineSettings` is the part that crosses to the runner: one frozen dataclass, written
once as JSON (`to_json`/`from_json`), checked by the same rules however it was built.

Precedence: a command-line flag, then the environment, then the default here. For what a request
may choose itself (context size, sampling), see `localrun.server.defaults`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from localrun.durations import parse_duration
from localrun.errors import LocalrunError, UsageError
from localrun.sampling import MAX_DRAFT
from localrun.sizes import parse_size

DEFAULT_PORT = 11435  # Ollama's 11434 + 1: both can run side by side.
FLASH_ATTN = ("auto", "on", "off", "prefix")
PREFIX_CELLS = 256  # "prefix": the cells of each sequence computed with flash attention (engine/flashrows.py)
KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
SPECULATIVE_ON = 16  # the draft length "on" means


def resolve_flash_attn(setting: str, kv_cache_type: str, gpu_offload: bool) -> str:
    """What "auto" means here: on a GPU, llama.cpp's own choice; quantized KV needs flash attention;
    on a CPU "prefix": flash attention for each sequence's first 256 cells, none after
    (engine/flashrows.py), which the engine turns "off" for models it does not fit. The CPU kernel
    is fastest over a short cache (eight short chats 1.29x off on an AMD EPYC) and over a long one
    loses to attention without it on some CPUs (decoding after 1.4k tokens 0.54-0.70x off on an
    Intel Xeon and two AMD EPYCs; docs/benchmarks.md): prefix mode has the first's speed and the
    second's. Here, not in the engine, so that the daemon's memory estimate (`memory.py`), which
    never imports llama.cpp, reads the same choice.
    """
    if setting != "auto":
        return setting
    if kv_cache_type != "f16":
        return "on"
    return "auto" if gpu_offload else "prefix"


# --- rules: how one value is written, and what it may be ------------------------------------------

@dataclass(frozen=True, slots=True)
class Rule:
    """How a setting is written: `parse` turns text into the value (ValueError when it cannot), `ok`
    checks a value however it was made, `show` writes one back; `accepts` says it in words."""

    accepts: str
    convert: Callable[[str], Any] = str

    def parse(self, text: str) -> Any:
        return self.convert(text)

    def ok(self, value: Any) -> bool:
        return True

    def show(self, value: Any) -> str:
        return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Whole(Rule):
    """An integer in [low, high], or one of a few words that stand for a value (auto = None)."""

    low: int = 0
    high: int | None = None
    words: Mapping[str, int | None] = field(default_factory=dict)

    def parse(self, text: str) -> int | None:
        word = text.strip().lower()
        return self.words[word] if word in self.words else int(word)

    def ok(self, value: Any) -> bool:
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            return value is None and None in self.words.values()
        return self.low <= value and (self.high is None or value <= self.high)

    def show(self, value: Any) -> str:
        return next((word for word, v in self.words.items() if v == value), str(value))


@dataclass(frozen=True, slots=True)
class Choice(Rule):
    options: tuple[str, ...] = ()

    def parse(self, text: str) -> str:
        return text.strip().lower()

    def ok(self, value: Any) -> bool:
        return value in self.options


_ENDPOINT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class Endpoints(Rule):
    """HOST:PORT addresses, comma-separated (IPv6 in brackets); none is the empty list."""

    def parse(self, text: str) -> tuple[str, ...]:
        return _csv(text)

    def ok(self, value: Any) -> bool:
        return isinstance(value, (tuple, list)) and all(
            isinstance(v, str) and (m := _ENDPOINT.fullmatch(v)) is not None and 0 < int(m.group(2)) < 65536
            for v in value)

    def show(self, value: Any) -> str:
        return ",".join(value)


def _whole(low: int, high: int | None = None, words: Mapping[str, int | None] | None = None, what: str = "") -> Whole:
    """A Whole whose `accepts` is written from its bounds: "auto or an integer of at least 1"."""
    span = f"an integer from {low} to {high}" if high is not None else f"an integer of at least {low}"
    named = ", ".join(words or ())
    return Whole(f"{named} or {what or span}" if named else what or span, low=low, high=high, words=words or {})


def _choice(options: tuple[str, ...]) -> Choice:
    return Choice(f"one of {', '.join(options)}", options=options)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except LocalrunError:
        raise ValueError(text) from None


def _flag(text: str) -> bool:
    """Lenient: anything but an explicit no is yes (LOCALRUN_DEBUG is read while reporting an error)."""
    return text.strip().lower() not in ("", "0", "false", "no", "off")


_SWITCH = {"on": True, "1": True, "true": True, "yes": True, "off": False, "0": False, "false": False, "no": False}


def _switch(text: str) -> bool:
    word = text.strip().lower()
    if word not in _SWITCH:
        raise ValueError(text)
    return _SWITCH[word]


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


TEXT = Rule("text")
COUNT = _whole(1)
DURATION = Rule("a duration such as 5m, 1h30m, 90s or 300 (seconds; negative = forever)", _duration)


@dataclass(frozen=True, slots=True)
class Wait(Rule):
    """A duration that cannot be negative (how long to wait)."""

    def ok(self, value: Any) -> bool:
        return value >= 0


WAIT = Wait("a duration such as 10s, 1m or 30 (seconds), not negative", _duration)
SIZE = Rule("a size in bytes or with a unit, such as 8GiB or 512MB (0 = 75% of RAM)", parse_size)

ENGINE_RULES: dict[str, Rule] = {
    "parallel": COUNT,
    "ctx_size": _whole(8),
    "batch_size": COUNT,
    "threads": _whole(1, words={"auto": None}),
    "flash_attn": _choice(FLASH_ATTN),
    "kv_cache_type": _choice(KV_CACHE_TYPES),
    "gpu_layers": _whole(-1, words={"auto": None}, what="a number of layers"),
    "seed": Whole("an integer or none", low=-(2**63), words={"none": None}),
    "embed_ctx_size": _whole(8),
    "speculative": Whole(f"off, on or a draft length from 0 to {MAX_DRAFT}", low=0, high=MAX_DRAFT,
                         words={"off": 0, "on": SPECULATIVE_ON, "false": 0, "true": SPECULATIVE_ON, "no": 0,
                                "yes": SPECULATIVE_ON}),
    "rpc": Endpoints("HOST:PORT addresses of RPC workers, comma-separated"),
    "stream_interval_ms": _whole(0, 1000, words={"auto": None}, what="milliseconds from 0 to 1000"),
    "burst_wait_ms": _whole(0, 1000, what="milliseconds from 0 to 1000"),
    "prefill_slice_ms": _whole(0, 60000, what="milliseconds from 0 to 60000"),
}


# --- what crosses to the runner ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How one model is loaded and served: built by the daemon, sent to its runner as JSON, used by the
    engine. `ctx_size` is per slot: the context holds `parallel * ctx_size` KV cells.

    By default each slot has its own KV stream. With one unified buffer (`kv_unified=True`) a
    sequence's cells sit wherever there was room, and the attention kernels then sum the same
    values in a different order than for that sequence alone: greedy output could differ from a
    solo run once the cache is fragmented by prefix reuse. Separate streams keep every sequence
    bit-identical to running alone, and each attends only over its own cells.
    """

    parallel: int = 4
    ctx_size: int = 4096
    batch_size: int = 512
    threads: int | None = None  # None = auto: physical cores, tuned against n-1 while running
    flash_attn: str = "auto"
    kv_cache_type: str = "f16"
    gpu_layers: int | None = None  # None = all when the build can offload, else 0
    seed: int | None = None  # default seed for requests without one; None = random per request
    embed_ctx_size: int = 2048  # context of the lazily created embeddings context
    kv_unified: bool = False  # one KV buffer shared by all slots (see above)
    speculative: int = 0  # draft length for requests that do not choose one; 0 = no speculative decoding
    safe_mode: bool = False  # plain CPU weights: no repacking, no AMX (after a load crashed; see cpu_features)
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers (HOST:PORT) the model's layers are spread over
    stream_interval_ms: int | None = None  # a stream's tokens wait up to this many ms; None = auto (runner/interval.py)
    burst_wait_ms: int = 10  # an idle runner waits this long for each next request of a burst (runner/bursts.py)
    prefill_slice_ms: int = 250  # prompt work a step does beside decoding streams (4x each without); 0 = the batch size

    def __post_init__(self) -> None:
        object.__setattr__(self, "rpc", tuple(self.rpc) if isinstance(self.rpc, list) else self.rpc)  # from JSON
        for name, rule in ENGINE_RULES.items():
            value = getattr(self, name)
            if not rule.ok(value):
                raise UsageError(f"{name} must be {rule.accepts}, got {value!r}")
        if self.kv_cache_type != "f16" and self.flash_attn == "off":
            # llama.cpp needs flash attention for a quantized V cache: refuse now, not at the first load.
            raise UsageError(f"a {self.kv_cache_type} KV cache needs flash attention: "
                             f"set LOCALRUN_FLASH_ATTN to auto or on")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> EngineSettings:
        return cls(**json.loads(text))


_ENGINE = EngineSettings()


# --- the table -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Setting:
    env: str
    default: str
    help: str
    rule: Rule = TEXT


def _engine(env: str, name: str, help: str) -> Setting:
    """A setting of the engine: its rule and default are EngineSettings'."""
    rule = ENGINE_RULES[name]
    return Setting(env, rule.show(getattr(_ENGINE, name)), help, rule)


SETTINGS: tuple[Setting, ...] = (
    Setting("LOCALRUN_HOME", "", "Root for models, config, logs and runtime files (default: platformdirs).",
            Rule("a directory", lambda text: Path(text).expanduser() if text else None)),
    Setting("LOCALRUN_HOST", f"127.0.0.1:{DEFAULT_PORT}", "Daemon address: bind address for serve, target for the CLI."),
    Setting("LOCALRUN_MIRROR", "", "Rewrite the host of every model download URL (e.g. http://127.0.0.1:8000)."),
    Setting("LOCALRUN_ALLOW_PRIVATE_PULL", "", "Set to 1 to let /api/pull fetch from loopback, link-local and private "
                                           "addresses (the mirror's host is always allowed).", Rule("1 or 0", _flag)),
    Setting("LOCALRUN_API_KEY", "", "API key(s), comma-separated, or @FILE with one key per line.",
            Rule("keys, comma-separated, or @FILE", _api_keys)),
    Setting("LOCALRUN_ORIGINS", "", "Extra allowed CORS origins, comma-separated (loopback origins are always allowed).",
            Rule("origins, comma-separated", _csv)),
    Setting("LOCALRUN_KEEP_ALIVE", "5m", "How long an idle model stays loaded (duration, seconds; negative = forever).",
            DURATION),
    Setting("LOCALRUN_MAX_LOADED_MODELS", "3", "Most models loaded at once; the least recently used idle one is evicted.",
            COUNT),
    Setting("LOCALRUN_MEMORY_BUDGET", "0", "Memory for loaded models in bytes or with a unit (8GiB); 0 = 75% of RAM.",
            SIZE),
    Setting("LOCALRUN_MAX_QUEUE", "64", "Requests waiting per model before new ones get 503 with Retry-After.",
            _whole(0)),
    Setting("LOCALRUN_MAX_BODY", "32MiB", "Largest request body (bytes or with a unit); bigger ones get 413.",
            Rule("a size in bytes or with a unit, such as 32MiB", parse_size)),
    Setting("LOCALRUN_MAX_MESSAGES", "4096", "Most messages in one chat request.", COUNT),
    Setting("LOCALRUN_MAX_TOKENS", "1048576", "Largest max_tokens / num_predict a request may ask for.", COUNT),
    Setting("LOCALRUN_MAX_INPUTS", "2048", "Most inputs (embeddings, prompts, choices) in one request.", COUNT),
    Setting("LOCALRUN_MAX_RESPONSES", "256", "Responses API: most earlier responses kept in memory for "
                                              "previous_response_id (the oldest is forgotten first).", COUNT),
    _engine("LOCALRUN_PARALLEL", "parallel", "Sequence slots per model (concurrent requests batched together)."),
    Setting("LOCALRUN_CTX_SIZE", "auto", "Context length per slot, in tokens, for models whose Modelfile sets no "
                                         "num_ctx; auto = the model's trained length, as far as the memory budget "
                                         "and LOCALRUN_MAX_CTX allow.", _whole(8, words={"auto": None})),
    Setting("LOCALRUN_MAX_CTX", "0", "Ceiling for the automatic context per slot (0 = none: the trained length "
                                     "and the memory budget decide).", _whole(0)),
    _engine("LOCALRUN_BATCH_SIZE", "batch_size", "Most tokens evaluated in one engine step (decode + prefill chunks)."),
    _engine("LOCALRUN_THREADS", "threads", "CPU threads for decoding; auto picks from the cores and measured load."),
    _engine("LOCALRUN_FLASH_ATTN", "flash_attn", "Flash attention: on, off, prefix (a sequence's first 256 cells) or auto."),
    _engine("LOCALRUN_KV_CACHE_TYPE", "kv_cache_type",
            "KV cache type: f16, q8_0 or q4_0 (quantized types need flash attention)."),
    _engine("LOCALRUN_EMBED_CTX_SIZE", "embed_ctx_size",
            "Most tokens one embedding input may hold (capped at the model's trained context): longer inputs are "
            "cut where the request allows it (Ollama's truncate, its default) and refused otherwise."),
    _engine("LOCALRUN_SPECULATIVE", "speculative", f"Speculative decoding by prompt lookup: off, on ({SPECULATIVE_ON} "
                                                   "tokens) or the most tokens drafted per step; requests may choose "
                                                   "their own."),
    _engine("LOCALRUN_GPU_LAYERS", "gpu_layers", "Layers to offload to the GPU when the build supports it (auto = all)."),
    _engine("LOCALRUN_STREAM_INTERVAL_MS", "stream_interval_ms",
            "0 = every token is sent as it comes; N = after a stream's first token, its tokens are held and "
            "sent together about every N ms (still a chunk per token): fewer wake-ups of the daemon, which on "
            "a machine without a spare CPU is decode speed; auto = 25 while the decode threads use every CPU and "
            "the model is not on a GPU, else 0 (runner/interval.py, docs/benchmarks.md)."),
    _engine("LOCALRUN_BURST_WAIT_MS", "burst_wait_ms",
            "While requests come in bursts, an idle model waits up to N ms for each next one (5 N in all), so "
            "that their prompts start together; 0 = never wait (runner/bursts.py)."),
    _engine("LOCALRUN_PREFILL_SLICE_MS", "prefill_slice_ms",
            "While streams decode, a step evaluates other requests' prompts for about N ms at most (the rate "
            "is measured), so a long prompt arriving slows running streams instead of stopping them; with no "
            "stream decoding each prompt in line takes about 4 N ms a step, so a request arriving waits that "
            "long, not a whole batch; 0 = up to LOCALRUN_BATCH_SIZE tokens a step, as llama-server does "
            "(engine/promptpace.py)."),
    _engine("LOCALRUN_RPC", "rpc", "llama.cpp RPC workers (`localrun worker`) to spread each model's layers over, "
                                   "HOST:PORT,... (needs llama-cpp-python built with -DGGML_RPC=on)."),
    Setting("LOCALRUN_SHUTDOWN_TIMEOUT", "10s", "How long a stopping daemon lets requests in flight finish before it "
                                               "ends them with an error (duration).", WAIT),
    Setting("LOCALRUN_UI", "on", "Serve the web chat page at / (on or off; `serve --no-ui` turns it off too).",
            Rule("on or off", _switch)),
    Setting("LOCALRUN_DEBUG", "", "Set to 1 for tracebacks and debug logs.", Rule("1 or 0", _flag)),
)

_BY_ENV = {s.env: s for s in SETTINGS}


def read(env: str, environ: Mapping[str, str] | None = None, flag: tuple[str, str | None] = ("", None)) -> Any:
    """One setting's typed value: the command-line `flag` (its name and text) when given, else the
    environment's text, else the default. A bad value raises UsageError naming where it came from."""
    setting = _BY_ENV[env]
    name, text = flag
    if text is None:
        name, text = env, (os.environ if environ is None else environ).get(env, "")
        text = text if text.strip() else setting.default
    rule = setting.rule
    try:
        value = rule.parse(text)
    except ValueError:
        value = _BAD
    if value is _BAD or not rule.ok(value):
        raise UsageError(f"{name} must be {rule.accepts}, got {text!r}")
    return value


_BAD = object()


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the daemon, typed, parsed once at start-up (`Settings.from_env`)."""

    home: Path | None
    host: str
    mirror: str
    api_keys: tuple[str, ...]
    origins: tuple[str, ...]
    keep_alive: float  # seconds; negative = forever
    max_loaded_models: int
    memory_budget: int  # bytes; 0 = 75% of RAM
    max_queue: int
    max_body: int  # bytes
    max_messages: int
    max_tokens: int
    max_inputs: int
    ctx_size: int | None  # per slot, for models that choose none; None = auto (localrun.memory.default_context)
    max_ctx: int  # ceiling of the automatic context; 0 = none
    max_responses: int
    engine: EngineSettings
    shutdown_timeout: float  # seconds requests in flight may take to finish when the daemon stops
    ui: bool  # the web chat page at /
    debug: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 flags: Mapping[str, tuple[str, str | None]] | None = None) -> Settings:
        """Parse every setting; `flags` maps a variable to the command-line flag that overrides it
        (name, text or None), as `serve --gpu-layers` overrides LOCALRUN_GPU_LAYERS."""
        flags = flags or {}

        def get(env: str) -> Any:
            return read(env, environ, flags.get(env, ("", None)))

        ctx_size = get("LOCALRUN_CTX_SIZE")
        engine = EngineSettings(  # ctx_size: the manager picks each load's (server/manager.py)
            parallel=get("LOCALRUN_PARALLEL"), ctx_size=ctx_size or _ENGINE.ctx_size,
            batch_size=get("LOCALRUN_BATCH_SIZE"),
            threads=get("LOCALRUN_THREADS"), flash_attn=get("LOCALRUN_FLASH_ATTN"),
            kv_cache_type=get("LOCALRUN_KV_CACHE_TYPE"), gpu_layers=get("LOCALRUN_GPU_LAYERS"),
            embed_ctx_size=get("LOCALRUN_EMBED_CTX_SIZE"),
            speculative=get("LOCALRUN_SPECULATIVE"), rpc=get("LOCALRUN_RPC"),
            stream_interval_ms=get("LOCALRUN_STREAM_INTERVAL_MS"), burst_wait_ms=get("LOCALRUN_BURST_WAIT_MS"),
            prefill_slice_ms=get("LOCALRUN_PREFILL_SLICE_MS"),
        )
        return cls(
            home=get("LOCALRUN_HOME"), host=get("LOCALRUN_HOST"), mirror=get("LOCALRUN_MIRROR"),
            api_keys=get("LOCALRUN_API_KEY"), origins=get("LOCALRUN_ORIGINS"), keep_alive=get("LOCALRUN_KEEP_ALIVE"),
            max_loaded_models=get("LOCALRUN_MAX_LOADED_MODELS"), memory_budget=get("LOCALRUN_MEMORY_BUDGET"),
            max_queue=get("LOCALRUN_MAX_QUEUE"), max_body=get("LOCALRUN_MAX_BODY"),
            max_messages=get("LOCALRUN_MAX_MESSAGES"), max_tokens=get("LOCALRUN_MAX_TOKENS"),
            max_inputs=get("LOCALRUN_MAX_INPUTS"), ctx_size=ctx_size, max_ctx=get("LOCALRUN_MAX_CTX"),
            max_responses=get("LOCALRUN_MAX_RESPONSES"), engine=engine, shutdown_timeout=get("LOCALRUN_SHUTDOWN_TIMEOUT"),
            ui=get("LOCALRUN_UI"), debug=get("LOCALRUN_DEBUG"),
        )


def env_help() -> str:
    """The settings as lines for `serve --help`."""
    width = max(len(s.env) for s in SETTINGS)
    return "\n".join(f"{s.env:<{width}}  {s.help}" + (f" [default: {s.default}]" if s.default else "") for s in SETTINGS)


__all__ = ["DEFAULT_PORT", "ENGINE_RULES", "EngineSettings", "FLASH_ATTN", "KV_CACHE_TYPES", "Rule", "SETTINGS",
           "SPECULATIVE_ON", "Setting", "Settings", "env_help", "read", "resolve_flash_attn"]
