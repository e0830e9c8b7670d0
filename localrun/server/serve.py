"""Run the daemon in the foreground on uvicorn (what `localrun serve` calls)."""

from __future__ import annotations

import logging

from localrun.config import Config

GRACEFUL_SHUTDOWN_S = 10


def run_server(config: Config, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM; streams in flight get `GRACEFUL_SHUTDOWN_S` to finish, then runners stop."""
    import uvicorn

    from localrun.server.app import create_app

    level = logging.DEBUG if config.debug else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(config), host=host, port=port, log_level="debug" if config.debug else "info",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, access_log=config.debug)
