"""Whether ggml's AMX matrix kernel runs on this machine: run it once, in a child process.

The CPU reporting AMX and the OS enabling its tile state is not enough. Measured on an Intel Xeon VM
whose kernel enables AMX (XCR0 0x600e7): llama-cpp-python 0.3.36 built by GCC 12 (Debian 12) loads a
tile configuration without the row and column sizes its source sets (the compiled code zeroes 32 of
its 64 bytes and sets the palette only), and `ldtilecfg` raises a general-protection fault, SIGSEGV,
at the first matrix product over two or more rows. A VM whose OS withholds the tile state gets
SIGILL instead. In a child process such a crash costs a fraction of a second; in a runner it would
cost the model and every request in flight.

    python -m localrun.engine.amx_probe    exit 0 when a 32-row product on AMX-packed weights runs

The product is computed on zero weights: only whether the kernel runs matters, not what it computes.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

PROBE_TIMEOUT_S = 60.0

_Q8_0 = 8  # ggml_type
_F32 = 0
K, N, M = 256, 64, 32  # weight columns, weight rows (a multiple of 32), activation rows (> 1: tiles)


def amx_runs() -> bool:
    """Run the probe in a child process: True when it exits cleanly."""
    try:
        done = subprocess.run([sys.executable, "-m", "localrun.engine.amx_probe"], capture_output=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _probe() -> int:
    """Multiply AMX-packed Q8_0 weights by 32 rows of activations on the CPU backend."""
    from localrun.engine import backend

    backend.init_backend(probe_amx=False)
    amx = backend.extra_buffer_type("AMX")
    if amx is None:
        return 3  # nothing to probe: the build or ggml's own check left AMX out
    g = backend.ggml_function
    vp, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    init = g("ggml_init", vp, _InitParams)
    new_2d = g("ggml_new_tensor_2d", vp, vp, ctypes.c_int, i64, i64)
    overhead = g("ggml_tensor_overhead", sz)() * 8 + g("ggml_graph_overhead", sz)()
    weights_ctx, compute_ctx = init(_InitParams(overhead, None, True)), init(_InitParams(overhead, None, True))
    weights = new_2d(weights_ctx, _Q8_0, K, N)
    activations = new_2d(compute_ctx, _F32, K, M)
    product = g("ggml_mul_mat", vp, vp, vp, vp)(compute_ctx, weights, activations)
    graph = g("ggml_new_graph", vp, vp)(compute_ctx)
    g("ggml_build_forward_expand", None, vp, vp)(graph, product)
    alloc = g("ggml_backend_alloc_ctx_tensors_from_buft", vp, vp, vp)
    cpu = backend.cpu_device()
    if not alloc(weights_ctx, amx) or not alloc(compute_ctx, g("ggml_backend_dev_buffer_type", vp, vp)(cpu)):
        return 4
    tensor_set = g("ggml_backend_tensor_set", None, vp, vp, sz, sz)
    row_size = g("ggml_row_size", sz, ctypes.c_int, i64)
    zeros = ctypes.create_string_buffer(max(row_size(_Q8_0, K) * N, row_size(_F32, K) * M))
    tensor_set(weights, zeros, 0, row_size(_Q8_0, K) * N)
    tensor_set(activations, zeros, 0, row_size(_F32, K) * M)
    engine = g("ggml_backend_dev_init", vp, vp, ctypes.c_char_p)(cpu, None)
    return g("ggml_backend_graph_compute", ctypes.c_int, vp, vp)(engine, graph)  # GGML_STATUS_SUCCESS = 0


if __name__ == "__main__":
    sys.exit(_probe())
