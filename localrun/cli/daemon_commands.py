"""Daemon commands: serve (foreground), stop, status, ps, logs.

`serve` is the one CLI command that imports the server, and only inside its function.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import typer

from localrun.cli.app import app
from localrun.config import env_help

if TYPE_CHECKING:
    from localrun.client.address import Address


def target(host: Optional[str]) -> Address:
    """The daemon address from `--host` or LOCALRUN_HOST."""
    from localrun.client.address import parse_address
    from localrun.config import raw

    return parse_address(host or raw("LOCALRUN_HOST"))


HOST_HELP = "Daemon address (HOST[:PORT] or URL); default LOCALRUN_HOST."


@app.command(epilog="Settings (environment):\n\n" + env_help().replace("\n", "\n\n"))
def serve(
    host: Optional[str] = typer.Option(None, "--host", help="Bind address, HOST[:PORT]; default LOCALRUN_HOST."),
    port: Optional[int] = typer.Option(None, "--port", help="Bind port (overrides a port in --host)."),
    insecure: bool = typer.Option(False, "--insecure", help="Allow a non-loopback bind without LOCALRUN_API_KEY."),
    gpu_layers: Optional[str] = typer.Option(None, "--gpu-layers",
                                             help="Layers to offload when the build has a GPU backend: N or auto "
                                                  "(overrides LOCALRUN_GPU_LAYERS)."),
    kv_cache_type: Optional[str] = typer.Option(None, "--kv-cache-type",
                                                help="KV cache type: f16, q8_0 or q4_0 (overrides LOCALRUN_KV_CACHE_TYPE)."),
    speculative: Optional[str] = typer.Option(None, "--speculative",
                                              help="Speculative decoding: off, on or a draft length "
                                                   "(overrides LOCALRUN_SPECULATIVE)."),
    no_ui: bool = typer.Option(False, "--no-ui", help="Serve no web chat page at / (as LOCALRUN_UI=off)."),
) -> None:
    """Run the daemon in the foreground (logs to stderr; Ctrl-C or SIGTERM stops it gracefully)."""
    import signal
    from dataclasses import replace

    from localrun.cli import daemon
    from localrun.config import Config, check_kv_cache_type, parse_speculative
    from localrun.errors import DaemonUnavailable, UsageError

    if gpu_layers not in (None, "auto") and not gpu_layers.lstrip("-").isdigit():
        raise UsageError(f"--gpu-layers must be a number of layers or auto, got {gpu_layers!r}")
    if kv_cache_type is not None:
        check_kv_cache_type(kv_cache_type, Config.from_env().flash_attn)
    drafts = parse_speculative(speculative) if speculative is not None else None
    address = target(host)
    address = replace(address, port=port) if port is not None else address
    bind = address.host or "127.0.0.1"
    running = daemon.read_pid(address.port)
    if running:
        raise DaemonUnavailable(f"a localrun daemon (pid {running}) already runs on port {address.port}")
    _check_port_free(bind, address)
    from localrun.server.serve import run_server

    # uvicorn re-raises SIGTERM after its graceful shutdown; exiting 0 here lets the pid file go too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    daemon.write_pid_file(address.port)
    try:
        config = Config.from_env()
        config = replace(config, gpu_layers=gpu_layers or config.gpu_layers,
                         kv_cache_type=kv_cache_type or config.kv_cache_type,
                         speculative=config.speculative if drafts is None else drafts,
                         ui=config.ui and not no_ui)
        run_server(config, bind, address.port, insecure=insecure)
    finally:
        daemon.remove_pid_file(address.port)


def _check_port_free(bind: str, address: Address) -> None:
    import socket

    from localrun.cli import daemon
    from localrun.errors import DaemonUnavailable

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, address.port))
        except OSError as e:
            if daemon.probe(address) is daemon.State.UP:
                raise DaemonUnavailable(f"a localrun daemon already answers at {address.base_url}") from None
            if e.errno == 98 or "in use" in str(e).lower():
                raise DaemonUnavailable(daemon.busy_message(address)) from None
            raise DaemonUnavailable(f"cannot listen on {bind}:{address.port}: {e.strerror or e}") from None


@app.command()
def stop(host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP)) -> None:
    """Stop the background daemon (SIGTERM: requests in flight finish first)."""
    from localrun.cli import daemon

    address = target(host)
    pid = daemon.stop(address)
    print(f"stopped localrun (pid {pid})" if pid else f"localrun is not running at {address.base_url}")


@app.command()
def status(host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP)) -> None:
    """Say whether the daemon runs (exit 0) or not (exit 1), with its pid, version and loaded models."""
    from localrun.cli import daemon
    from localrun.client import Client

    address = target(host)
    pid = daemon.read_pid(address.port)  # also cleans a stale pid file
    state = daemon.probe(address)
    if state is daemon.State.FOREIGN:
        print(daemon.busy_message(address))
        raise typer.Exit(1)
    if state is daemon.State.DOWN:
        print(f"localrun is not running at {address.base_url}")
        raise typer.Exit(1)
    with Client.from_host(address.base_url) as client:
        version, loaded = client.version(), len(client.ps())
    owner = f"pid {pid}" if pid else "not started from this home"
    print(f"localrun {version} is running at {address.base_url} ({owner}); {loaded} model(s) loaded")


@app.command()
def ps(host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP)) -> None:
    """List the loaded models: NAME, ID, SIZE, PROCESSOR, CONTEXT (with a quantized KV cache's type), UNTIL."""
    from localrun.cli import daemon
    from localrun.cli.format import human_size, processor, table, until
    from localrun.client import Client

    address = target(host)
    models = []
    if daemon.probe(address) is daemon.State.UP:
        with Client.from_host(address.base_url) as client:
            models = client.ps()
    rows = [[m.name, _short_id(m.digest), human_size(m.size), processor(m.size, m.size_vram),
             _context(m), until(m.expires_at)] for m in models]
    print(table(["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"], rows))


def _context(m) -> str:
    """The context length, and the KV cache type when it is quantized ("4096 (KV q8_0)")."""
    quantized = m.kv_cache_type not in ("", "f16")
    return f"{m.context_length} (KV {m.kv_cache_type})" if quantized else str(m.context_length)


def _short_id(digest: str) -> str:
    return digest.removeprefix("sha256:").removeprefix("sha256-")[:12]


@app.command()
def logs(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until Ctrl-C."),
    tail: int = typer.Option(0, "--tail", "-n", help="Only the last N lines (0 = all)."),
    host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP),
) -> None:
    """Print the background daemon's log."""
    from localrun.cli import daemon
    from localrun.errors import LocalrunError

    path = daemon.log_file(target(host).port)
    if not path.exists():
        raise LocalrunError(f"no daemon log yet ({path})")
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
        sys.stdout.writelines(lines[-tail:] if tail > 0 else lines)
        sys.stdout.flush()
        if follow:
            _follow(f)


def _follow(f) -> None:
    import time

    try:
        while True:
            line = f.readline()
            if line:
                sys.stdout.write(line)
                sys.stdout.flush()
            else:
                time.sleep(0.2)
    except KeyboardInterrupt:
        return
