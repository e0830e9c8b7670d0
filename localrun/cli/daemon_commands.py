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
    from localrun.config import read

    return parse_address(host or read("LOCALRUN_HOST"))


HOST_HELP = "Daemon address (HOST[:PORT] or URL); default LOCALRUN_HOST."


@app.command(epilog="Settings (environment):\n\n\b\n" + env_help())  # \b: click keeps the lines as they are
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
    rpc: Optional[str] = typer.Option(None, "--rpc", help="Spread each model's layers over these `localrun worker`s: "
                                                          "HOST:PORT,... (overrides LOCALRUN_RPC)."),
) -> None:
    """Run the daemon in the foreground (logs to stderr; Ctrl-C or SIGTERM stops it gracefully)."""
    import signal
    from dataclasses import replace

    from localrun.cli import daemon
    from localrun.client.address import parse_address
    from localrun.config import Settings
    from localrun.errors import DaemonUnavailable

    config = Settings.from_env(flags={  # every setting checked here, before anything starts
        "LOCALRUN_GPU_LAYERS": ("--gpu-layers", gpu_layers), "LOCALRUN_KV_CACHE_TYPE": ("--kv-cache-type", kv_cache_type),
        "LOCALRUN_SPECULATIVE": ("--speculative", speculative), "LOCALRUN_UI": ("--no-ui", "off" if no_ui else None),
        "LOCALRUN_RPC": ("--rpc", rpc),
    })
    if config.engine.rpc:
        _check_rpc_build()
    address = parse_address(host or config.host)
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
        run_server(config, bind, address.port, insecure=insecure)
    finally:
        daemon.remove_pid_file(address.port)


def _check_rpc_build() -> None:
    """--rpc needs a llama.cpp built with its RPC backend: say how to rebuild before anything starts."""
    from localrun.cli.doctor_commands import build_info
    from localrun.errors import UsageError

    info = build_info()
    if not info.get("rpc"):
        raise UsageError(f"--rpc / LOCALRUN_RPC: {info.get('rpc_hint') or info.get('error', 'no RPC backend')}")


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
def stop(
    model: Optional[str] = typer.Argument(None, help="Unload only this model (the daemon keeps running)."),
    host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP),
) -> None:
    """Stop the background daemon: requests in flight get LOCALRUN_SHUTDOWN_TIMEOUT (10s) to finish, then
    end with an error. With MODEL, unload that model instead (after its requests in flight, as `ollama stop`)."""
    from localrun.cli import daemon

    address = target(host)
    if model is not None:
        return _unload(address, model)
    pid = daemon.stop(address)
    print(f"stopped localrun (pid {pid})" if pid else f"localrun is not running at {address.base_url}")


def _unload(address: Address, model: str) -> None:
    from localrun.cli import daemon
    from localrun.client import Client
    from localrun.errors import LocalrunError

    if daemon.probe(address) is not daemon.State.UP:
        raise LocalrunError(f"localrun is not running at {address.base_url}, so no model is loaded")
    with Client.from_host(address.base_url) as client:
        loaded = {m.name for m in client.ps()}
        if not loaded & _names_of(model):
            raise LocalrunError(f"model {model!r} is not loaded" + (f" (loaded: {', '.join(sorted(loaded))})"
                                                                     if loaded else ""))
        client.unload(model)


def _names_of(model: str) -> set[str]:
    """The names `/api/ps` may list `model` under: as typed, with `:latest`, and its catalogue name."""
    from localrun.errors import LocalrunError
    from localrun.store.store import Store

    names = {model, f"{model}:latest"}
    try:
        names.add(Store().resolve(model).name)
    except LocalrunError:
        pass
    return names


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Print the state as one JSON object."),
    host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP),
) -> None:
    """Say whether the daemon runs (exit 0) or not (exit 1), with its pid, version and loaded models."""
    from localrun.cli import daemon
    from localrun.cli.format import print_json
    from localrun.client import Client

    address = target(host)
    pid = daemon.read_pid(address.port)  # also cleans a stale pid file
    state = daemon.probe(address)
    report: dict = {"address": address.base_url, "state": state.value, "pid": pid, "version": None, "loaded": 0}
    if state is daemon.State.UP:
        with Client.from_host(address.base_url) as client:
            report.update(version=client.version(), loaded=len(client.ps()))
    if as_json:
        print_json(report)
    elif state is daemon.State.FOREIGN:
        print(daemon.busy_message(address))
    elif state is daemon.State.DOWN:
        print(f"localrun is not running at {address.base_url}")
    else:
        owner = f"pid {pid}" if pid else "not started from this home"
        print(f"localrun {report['version']} is running at {address.base_url} ({owner}); "
              f"{report['loaded']} model(s) loaded")
    if state is not daemon.State.UP:
        raise typer.Exit(1)


@app.command()
def ps(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array, one object per loaded model."),
    host: Optional[str] = typer.Option(None, "--host", help=HOST_HELP),
) -> None:
    """List the loaded models: NAME, ID, SIZE, PROCESSOR, CONTEXT (with a quantized KV cache's type), UNTIL."""
    from localrun.cli import daemon
    from localrun.cli.format import human_size, print_json, processor, table, until
    from localrun.client import Client

    address = target(host)
    models = []
    if daemon.probe(address) is daemon.State.UP:
        with Client.from_host(address.base_url) as client:
            models = client.ps()
    if as_json:
        print_json([{key: getattr(m, key) for key in _PS_JSON} for m in models])
        return
    rows = [[m.name, _short_id(m.digest), human_size(m.size), processor(m.size, m.size_vram),
             _context(m), until(m.expires_at)] for m in models]
    print(table(["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"], rows))


_PS_JSON = ("name", "digest", "size", "size_vram", "context_length", "expires_at", "kv_cache_type")  # `ps --json`


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

    if tail < 0:
        from localrun.errors import UsageError

        raise UsageError(f"--tail must be 0 (all) or more, got {tail}")
    path = daemon.log_file(target(host).port)
    if not path.exists():
        if not follow:
            raise LocalrunError(f"no daemon log yet ({path})")
        sys.stderr.write(f"waiting for the daemon to write its log ({path})\n")
        if not _wait_for(path):
            return
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
        sys.stdout.writelines(lines[-tail:] if tail > 0 else lines)
        sys.stdout.flush()
        if follow:
            _follow(f)


def _wait_for(path) -> bool:
    """Wait until `path` exists (True), or Ctrl-C (False)."""
    import time

    try:
        while not path.exists():
            time.sleep(0.2)
    except KeyboardInterrupt:
        return False
    return True


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
