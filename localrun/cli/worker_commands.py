"""`localrun worker`: lend this machine's GPU or CPU to a llama.cpp on another machine (RPC).

The worker is a runner-side process (`python -m localrun.runner --worker`), which this command becomes
(exec): the CLI never loads llama.cpp itself, and signals reach the worker directly.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from localrun.cli.app import app

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


@app.command()
def worker(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on. RPC has no authentication: "
                                                         "anything but loopback is for trusted networks only."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port to listen on."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads when lending the CPU [half the cores]."),
) -> None:
    """Serve this machine's GPU (or CPU) to `localrun serve --rpc HOST:PORT` on another machine (llama.cpp RPC)."""
    from localrun.errors import UsageError

    if not 0 < port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, got {port}")
    if host not in ("127.0.0.1", "::1", "localhost"):
        typer.echo(f"warning: listening on {host}: llama.cpp RPC is unauthenticated and unencrypted; anyone who "
                   "reaches this port can use this machine's device and read what it holds. Use it on a trusted "
                   "network only.", err=True)
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    command = [sys.executable, "-m", "localrun.runner", "--worker", endpoint]
    if threads:
        command += ["--threads", str(threads)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
