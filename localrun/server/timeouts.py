"""A deadline for each request's headers, which uvicorn does not have.

uvicorn's h11 protocol waits for the rest of a request's headers for as long as the client likes
(connections that sent part of their headers were still open after 40 s), so a client that opens
many connections and trickles bytes into them holds sockets and memory for free. This protocol
closes a connection whose request headers are not complete `HEADER_TIMEOUT_S` after it opened, or
after its previous response ended. The body is bounded by body.py (BODY_IDLE_TIMEOUT_S).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 15.0


class HeaderDeadline(H11Protocol):
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in: the body has its own deadline
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets the same time for its headers

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


__all__ = ["HEADER_TIMEOUT_S", "HeaderDeadline"]
