"""llama.cpp's RPC backend through ggml's API: one model's layers spread over several machines.

A worker (`localrun worker`) runs ggml's RPC server, lending this machine's GPU (or CPU) to a remote
llama.cpp. A runner started with RPC endpoints (`serve --rpc HOST:PORT,...`) adds each worker's devices
and passes them, with any local GPU, in `llama_model_params.devices`, so llama.cpp splits the layers
over them as llama-server's `--rpc` does. llama-cpp-python binds none of this (it dropped
`rpc_servers` in 0.3.15), so the functions are reached through the backend registry's proc addresses.

RPC is unauthenticated and unencrypted upstream: anyone who can reach a worker's port can run
computations on it and read what it holds. Workers bind to loopback unless told otherwise.

It needs a llama-cpp-python built with `-DGGML_RPC=on`; `available()` says whether this one was.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

from localrun.engine.backend import DEV_CPU, DEV_GPU, DEV_IGPU, ggml_function, init_backend, local_devices
from localrun.errors import ModelLoadError, UsageError

REBUILD = ('this llama-cpp-python was built without llama.cpp\'s RPC backend; rebuild it with '
           'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir llama-cpp-python '
           '(add your GPU flag, e.g. -DGGML_CUDA=on, to the same CMAKE_ARGS)')

_vp = ctypes.c_void_p


def _registry():
    """The RPC backend's registry entry, or None when this build has no RPC backend."""
    init_backend(probe_amx=False)
    return ggml_function("ggml_backend_reg_by_name", _vp, ctypes.c_char_p)(b"RPC") or None


def available() -> bool:
    return _registry() is not None


def _proc(name: str, restype, *argtypes):
    reg = _registry()
    if reg is None:
        raise UsageError(REBUILD)
    address = ggml_function("ggml_backend_reg_get_proc_address", _vp, _vp, ctypes.c_char_p)(reg, name.encode())
    if not address:
        raise UsageError(f"this llama.cpp's RPC backend has no {name}: rebuild llama-cpp-python "
                         f"{REBUILD.split('; ', 1)[1]}")
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def _devices_of(reg: int) -> list[int]:
    count = ggml_function("ggml_backend_reg_dev_count", ctypes.c_size_t, _vp)(reg)
    get = ggml_function("ggml_backend_reg_dev_get", _vp, _vp, ctypes.c_size_t)
    return [get(reg, i) for i in range(count)]


def offload_devices(endpoints: list[str]) -> ctypes.Array:
    """The NULL-terminated device list for llama_model_params.devices: this machine's GPUs, then every
    device of each RPC worker, in the order given. A worker that does not answer is a ModelLoadError."""
    add_server = _proc("ggml_backend_rpc_add_server", _vp, ctypes.c_char_p)
    remote = []
    for endpoint in endpoints:
        _reachable(endpoint)
        reg = add_server(endpoint.encode())
        found = _devices_of(reg) if reg else []
        if not found:
            raise ModelLoadError(f"RPC worker {endpoint} did not answer (is `localrun worker` running there?)")
        remote += found
    devices = local_devices(DEV_GPU, DEV_IGPU) + remote
    return (_vp * (len(devices) + 1))(*devices, None)


def _reachable(endpoint: str) -> None:
    """ggml aborts the process when a worker cannot be reached; ask first, to say so in one line."""
    host, _, port = endpoint.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise ModelLoadError(f"RPC worker {endpoint} is not reachable ({e.strerror or e}); "
                             "start `localrun worker` there") from None


def serve_worker(host: str, port: int, threads: int | None = None, cache_dir: str | None = None) -> threading.Thread:
    """Start ggml's RPC server on host:port in a daemon thread (it never returns while it serves) and
    return that thread: it ends early only when the server could not start (the port is taken)."""
    devices = local_devices(DEV_GPU, DEV_IGPU) or local_devices(DEV_CPU)
    start = _proc("ggml_backend_rpc_start_server", None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                  ctypes.c_size_t, ctypes.POINTER(_vp))
    endpoint = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode()
    array = (_vp * len(devices))(*devices)
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    cache = cache_dir.encode() if cache_dir else None
    thread = threading.Thread(target=start, args=(endpoint, cache, threads, len(devices), array), daemon=True,
                              name="rpc-server")
    thread.start()
    return thread


def device_names() -> list[str]:
    """What a worker lends: its GPUs, else its CPU."""
    name = ggml_function("ggml_backend_dev_description", ctypes.c_char_p, _vp)
    return [name(d).decode() for d in (local_devices(DEV_GPU, DEV_IGPU) or local_devices(DEV_CPU))]


__all__ = ["REBUILD", "available", "device_names", "offload_devices", "serve_worker"]
