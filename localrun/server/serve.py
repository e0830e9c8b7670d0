"""Run the daemon in the foreground on uvicorn (what `localrun serve` calls)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Callable

import uvicorn

from localrun.config import Settings
from localrun.server.timeouts import HeaderDeadline

CLOSE_S = 5  # after the drain: time for the final error events to reach their clients


def run_server(config: Settings, host: str, port: int, insecure: bool = False) -> None:
    """Serve until SIGINT/SIGTERM. Then nothing new is accepted, requests in flight get
    LOCALRUN_SHUTDOWN_TIMEOUT to finish, those still running end with a final "the server is shutting
    down" error (streams get it as their last event), connections get `CLOSE_S` more to close, and the
    runners stop.

    A non-loopback `host` without an API key is refused unless `insecure` (`serve --insecure`)."""
    from localrun.server.app import create_app
    from localrun.server.security import check_bind

    check_bind(host, config, insecure)
    drain_s = config.shutdown_timeout
    config = replace(config, host=f"[{host}]:{port}" if ":" in host else f"{host}:{port}")  # what the guards trust

    level = logging.DEBUG if config.debug else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(config)
    # h11 (with a deadline for headers): uvicorn would switch to httptools wherever that happens to be
    # installed, and httptools answers methods it does not know with its own 400 instead of the app's 405.
    # uvicorn's access log is off: server/access_log.py writes one with the model, tokens and request id.
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="debug" if config.debug else "info",
                                    timeout_graceful_shutdown=int(drain_s) + CLOSE_S, access_log=False,
                                    http=HeaderDeadline),
                     on_exit=lambda: app.state.manager.begin_shutdown(drain_s))
    server.run()


class _Server(uvicorn.Server):
    """uvicorn's server, calling `on_exit` on the event loop when a shutdown signal arrives."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:  # a signal handler: hand the work to the event loop
            self._loop.call_soon_threadsafe(self.on_exit)
