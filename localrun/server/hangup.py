"""Stop long work that answers once when its client hangs up.

A streamed answer notices a gone client at its next write; a request that answers once after
minutes of work (a perplexity job) writes nothing until it is done, so nobody would stop it and the
cores stay busy for an answer no one will read. `unless_hung_up` watches the connection meanwhile
and cancels the work, which tells the runner to stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from localrun.errors import Cancelled

T = TypeVar("T")
POLL_SECONDS = 0.25


async def unless_hung_up(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise Cancelled (nobody reads that)."""
    task = asyncio.ensure_future(work)
    try:
        while not (await asyncio.wait({task}, timeout=POLL_SECONDS))[0]:
            if await request.is_disconnected():
                raise Cancelled("the client closed the connection")
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
