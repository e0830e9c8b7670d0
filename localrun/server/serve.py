"""Run the daemon in the foreground on uvicorn (what `localrun serve` calls)."""

from __future__ import annotations

import logging
from dataclasses import replace

from localrun.config import Config

GRACEFUL_SHUTDOWN_S = 10


def run_server(config: Config, host: str, port: int, insecure: bool = False) -> None:
    """Serve until SIGINT/SIGTERM; streams in flight get `GRACEFUL_SHUTDOWN_S` to finish, then runners stop.

    A non-loopback `host` without an API key is refused unless `insecure` (`serve --insecure`)."""
    import uvicorn

    from localrun.server.app import create_app
    from localrun.server.security import check_bind

    check_bind(host, config, insecure)
    config = replace(config, host=f"[{host}]:{port}" if ":" in host else f"{host}:{port}")  # what the guards trust

    level = logging.DEBUG if config.debug else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(config), host=host, port=port, log_level="debug" if config.debug else "info",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, access_log=config.debug)
