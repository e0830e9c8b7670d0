"""The thin layer over llama-cpp-python's low-level ctypes API: model, context, batch, vocabulary.

Everything else in the engine speaks Python lists and ints; only this module touches pointers.
"""

from __future__ import annotations

import ctypes
import logging

import llama_cpp as L

from localrun import cpu_features
from localrun.errors import ModelLoadError

log = logging.getLogger("localrun.llama")

_KV_TYPES = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0, "q4_0": L.GGML_TYPE_Q4_0}
_FLASH = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}


@L.llama_log_callback
def _log_to_python(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp chatters on stderr by default; keep it in Python logging at debug level."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(text.decode("utf-8", "replace").rstrip("\n"))


_cpu_plan: cpu_features.CpuPlan | None = None


def init_backend(probe_amx: bool = True) -> cpu_features.CpuPlan:
    """Once per process: route llama.cpp's log to Python logging, initialise its backends, and keep
    the weights out of CPU features this machine cannot run (see cpu_features). Returns the decision.

    Where the CPU and the OS both allow AMX and the build has it, ggml's AMX kernel is first run in a
    child process (amx_probe): the decision cannot be read off flags alone.
    """
    global _cpu_plan
    if _cpu_plan is None:
        L.llama_log_set(_log_to_python, ctypes.c_void_p(0))
        L.llama_backend_init()
        machine, features = cpu_features.probe(), cpu_features.build_features(system_info())
        _cpu_plan = cpu_features.plan(machine, features)
        if probe_amx and not _cpu_plan.avoid_amx and extra_buffer_type("AMX") is not None:
            from localrun.engine.amx_probe import amx_runs

            _cpu_plan = cpu_features.plan(machine, features, amx_runs=amx_runs())
        if _cpu_plan.avoid_amx:
            drop_extra_buffer_type("AMX")
    return _cpu_plan


def system_info() -> str:
    return L.llama_print_system_info().decode("utf-8", "replace").strip()


def ggml_function(name: str, restype, *argtypes):
    """A function of ggml's API, which llama-cpp-python loads but does not bind."""
    from llama_cpp._ggml import libggml

    fn = getattr(libggml, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


DEV_CPU, DEV_GPU, DEV_IGPU = 0, 1, 3  # enum ggml_backend_dev_type


def local_devices(*types: int) -> list[int]:
    """This machine's ggml devices of the given types (DEV_*)."""
    vp = ctypes.c_void_p
    count = ggml_function("ggml_backend_dev_count", ctypes.c_size_t)()
    get = ggml_function("ggml_backend_dev_get", vp, ctypes.c_size_t)
    kind = ggml_function("ggml_backend_dev_type", ctypes.c_int, vp)
    return [dev for dev in (get(i) for i in range(count)) if kind(dev) in types]


def has_gpu() -> bool:
    """Whether this machine has a GPU for layers. Not llama_supports_gpu_offload(): that also says yes
    for a CPU-only build with the RPC backend, where "auto" would then turn on CPU flash attention."""
    init_backend()
    return bool(local_devices(DEV_GPU, DEV_IGPU))


def cpu_device() -> int:
    return ggml_function("ggml_backend_dev_by_type", ctypes.c_void_p, ctypes.c_int)(0)  # ..._DEVICE_TYPE_CPU


def _cpu_extra_buffer_types():
    """The CPU device's NULL-terminated array of extra buffer types (AMX, weight repacking, ...), which
    llama.cpp reads at every model load to decide where the weights go; None when the build has none."""
    vp = ctypes.c_void_p
    dev = cpu_device()
    reg = ggml_function("ggml_backend_dev_backend_reg", vp, vp)(dev)
    address = ggml_function("ggml_backend_reg_get_proc_address", vp, vp, ctypes.c_char_p)(
        reg, b"ggml_backend_dev_get_extra_bufts")
    if not dev or not address:
        return None
    return ctypes.CFUNCTYPE(ctypes.POINTER(vp), vp)(address)(dev)


def _buffer_types(array=None) -> list[tuple[str, int]]:
    """(name, pointer) of each entry of the CPU device's extra buffer types (`array`, fetched if None)."""
    array = _cpu_extra_buffer_types() if array is None else array
    found, i = [], 0
    name = ggml_function("ggml_backend_buft_name", ctypes.c_char_p, ctypes.c_void_p)
    while array and array[i]:
        found.append((name(array[i]).decode(), array[i]))
        i += 1
    return found


def extra_buffer_types() -> list[str]:
    """Names of the extra buffer types model loads may put weights in ("AMX", "CPU_REPACK")."""
    return [name for name, _ in _buffer_types()]


def extra_buffer_type(name: str) -> int | None:
    return next((buft for found, buft in _buffer_types() if found == name), None)


def drop_extra_buffer_type(name: str) -> bool:
    """Remove one extra buffer type from the list later model loads choose from, keeping the others.

    llama.cpp's only switch is all or nothing (`use_extra_bufts`), and nothing means no weight
    repacking either, which costs prefill speed for no reason when only AMX is unusable. ggml computes
    with an extra buffer type only for weights stored in it, so a type no weight goes into is never run.
    """
    array = _cpu_extra_buffer_types()
    found = _buffer_types(array)
    keep = [buft for found_name, buft in found if found_name != name]
    for j in range(len(found)):
        array[j] = keep[j] if j < len(keep) else None
    return len(keep) < len(found)


class Model:
    """A loaded GGUF model and its vocabulary."""

    def __init__(self, path: str, gpu_layers: int | None, safe_mode: bool = False, rpc: tuple[str, ...] = ()) -> None:
        init_backend()
        params = L.llama_model_default_params()
        self.offloads = offload = has_gpu() or bool(rpc)  # layers have somewhere to go
        self.gpu_layers = (999 if offload else 0) if gpu_layers is None else (gpu_layers if offload else 0)
        params.n_gpu_layers = self.gpu_layers
        if rpc:  # the layers go to these workers (and any local GPU); see engine/rpc.py
            from localrun.engine.rpc import offload_devices

            self._devices = offload_devices(list(rpc))  # referenced for as long as llama.cpp may read it
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        params.use_extra_bufts = not safe_mode  # safe mode: plain CPU weights, no repacking, no AMX
        self.ptr = L.llama_model_load_from_file(path.encode(), params)
        if not self.ptr:
            raise ModelLoadError(f"model failed to load: {path} (not a valid GGUF model for this llama.cpp build)")
        self.vocab = L.llama_model_get_vocab(self.ptr)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self._piece_buf = ctypes.create_string_buffer(256)

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def chat_template(self) -> str | None:
        raw = L.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # more tokens than bytes + 8 cannot happen, but the API allows asking again
            buf = (L.llama_token * -n)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one token as generated text (special tokens render as nothing)."""
        cached = self._pieces[token]
        if cached is None:
            cached = self._pieces[token] = self._render(token, special=False)
        return cached

    def special_piece(self, token: int) -> bytes:
        """The bytes of one token with special tokens by name ("<|im_end|>"), as `tokenize` parses them."""
        return self._render(token, special=True) if token >= 0 else b""

    def token_text(self, token: int) -> str:
        """A token as the caller should see it in log-probabilities and metadata."""
        return self.special_piece(token).decode("utf-8", "replace")

    def _render(self, token: int, special: bool) -> bytes:
        n = L.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
            return buf.raw[:n]
        return self._piece_buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return L.llama_vocab_is_eog(self.vocab, token)

    def eog_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if L.llama_vocab_is_eog(self.vocab, t)]

    def free(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None


def new_context(model: Model, *, n_ctx: int, n_batch: int, n_seq_max: int, threads: int,
                flash_attn: str = "auto", kv_type: str = "f16", kv_unified: bool = False, embeddings: bool = False,
                pooling: int = L.LLAMA_POOLING_TYPE_UNSPECIFIED, swa_full: bool = True):
    """A llama context of `n_ctx` KV cells for `n_seq_max` sequences: one stream of n_ctx/n_seq_max
    cells per sequence, or with `kv_unified` one buffer all sequences share. A sliding-window model's
    window layers keep every cell with `swa_full` (what a context that cuts its cache back anywhere
    needs); without it they hold only the window, as llama-server does: less memory, and long prompts
    no longer attend over masked cells in those layers."""
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
    params.n_seq_max, params.kv_unified, params.swa_full = n_seq_max, kv_unified, swa_full
    params.n_threads = params.n_threads_batch = threads
    params.flash_attn_type = _FLASH[flash_attn]
    params.type_k = params.type_v = _KV_TYPES[kv_type]
    params.embeddings, params.pooling_type = embeddings, pooling
    params.no_perf = True
    ctx = L.llama_init_from_model(model.ptr, params)
    if not ctx:
        raise ModelLoadError(f"model failed to load: cannot create a context of {n_ctx} tokens "
                             f"(flash_attn={flash_attn}, kv_cache_type={kv_type})")
    return ctx


def seq_state(ctx, seq_id: int) -> bytes:
    """One sequence's KV cells as llama.cpp saves them (positions, keys, values)."""
    size = L.llama_state_seq_get_size(ctx, seq_id)
    buf = (ctypes.c_uint8 * size)()
    return ctypes.string_at(buf, L.llama_state_seq_get_data(ctx, buf, size, seq_id))  # slicing made a list of ints


def set_seq_state(ctx, seq_id: int, state: bytes) -> bool:
    """Restore saved cells as sequence `seq_id`'s (replacing what it held); False if llama.cpp refused."""
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return L.llama_state_seq_set_data(ctx, buf, len(state), seq_id) == len(state)


class Batch:
    """One reusable `llama_batch`: filled token by token, decoded, cleared."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw = L.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its index (the index for llama_get_logits_ith)."""
        i, b = self.n, self.raw
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
        b.seq_id[i][0] = seq_id
        self.n = i + 1
        return i

    def decode(self, ctx) -> int:
        self.raw.n_tokens = self.n
        return L.llama_decode(ctx, self.raw)

    def free(self) -> None:
        if self.raw is not None:
            L.llama_batch_free(self.raw)
            self.raw = None


__all__ = ["DEV_CPU", "DEV_GPU", "DEV_IGPU", "Batch", "Model", "cpu_device", "drop_extra_buffer_type", "extra_buffer_type", "extra_buffer_types",
           "ggml_function", "has_gpu", "init_backend", "local_devices", "new_context", "seq_state", "set_seq_state",
           "system_info"]
