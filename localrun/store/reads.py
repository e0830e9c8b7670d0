"""Wide socket reads for fast links: 1 MiB per read instead of httpcore's 64 KiB.

Every read costs tens of microseconds of Python in httpcore, h11 and httpx, which on a fast link
(a LAN mirror, loopback) is a third of the reader thread's time; bigger reads divide it. A read
returns what has arrived, so it never waits longer. TLS reads return one record (at most 16 KiB)
whatever they ask for, so only plain-TCP connections are widened.

Buffers of 1 MiB are above glibc's default mmap threshold (128 KiB) and trim threshold: each one
would be mapped fresh, zero-filled page by page and handed back to the kernel when freed, 40-50
thousand page faults per 300 MB, costing more than the wider reads save. `_keep_buffers` raises
both thresholds once per process (glibc only; elsewhere nothing changes), so the buffers come
from the heap and are reused; the price is up to TRIM_THRESHOLD bytes of freed heap kept.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import httpx

READ_SIZE = 1 << 20  # bytes per socket read on plain-TCP connections
MMAP_THRESHOLD = 4 << 20  # allocations below this come from the heap (glibc default: 128 KiB, adaptive)
TRIM_THRESHOLD = 32 << 20  # free heap kept before any is returned to the kernel
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>


def widen_reads(response: httpx.Response) -> None:
    """Let `response`'s connection read up to READ_SIZE bytes per call, if it is plain TCP.

    The hook is the connection's `network_stream` (an httpcore extension); where that is
    missing or is TLS, nothing changes."""
    stream = response.extensions.get("network_stream")
    if stream is None or getattr(stream, "_localrun_widened", False) or stream.get_extra_info("ssl_object"):
        return
    read = stream.read
    try:
        stream._localrun_widened = True  # a kept-alive connection comes back: widen it once
    except AttributeError:  # a stream class with __slots__: leave it as it is
        return
    _keep_buffers()
    stream.read = lambda max_bytes, timeout=None: read(max(max_bytes, READ_SIZE), timeout)


@functools.cache
def _keep_buffers() -> bool:
    """Make glibc serve and keep 1 MiB buffers from its heap (see the module docstring)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["READ_SIZE", "widen_reads"]
