"""Stop work that answers once when its client hangs up.

A streamed answer notices a gone client at its next write; a request that answers once (a
non-streamed generation, a perplexity job) writes nothing until it is done, so nobody would stop it:
the slot or the cores stay busy for an answer no one will read. `unless_hung_up` waits on the
connection beside the work (the ASGI `http.disconnect` message) and cancels the work when it comes,
which tells the runner to stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from localrun.errors import Cancelled

T = TypeVar("T")


async def unless_hung_up(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise Cancelled (nobody reads that).

    The body has been read by then, so the next ASGI message can only be the disconnect.
    """
    task = asyncio.ensure_future(work)
    hangup = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, hangup}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise Cancelled("the client closed the connection")
        return task.result()
    finally:
        for pending in (hangup, task):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
